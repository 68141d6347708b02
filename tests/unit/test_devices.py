"""GPU partitioning per worker (pure: no GPU, no TensorFlow)."""

from __future__ import annotations

import pytest

from mwnotebook import devices
from mwnotebook.errors import ConfigError


@pytest.mark.parametrize("value, expected", [
    (None, None), ("", []), ("-1", []), ("0,1", ["0", "1"]), (" 2, 3 ", ["2", "3"]),
    ("0,-1,1", ["0"]), ("GPU-abc,GPU-def", ["GPU-abc", "GPU-def"]), ("MIG-x", ["MIG-x"]),
    ("1,junk,2", ["1"]),
])
def test_parse_visible_devices_follows_cuda_rules(value, expected):
    assert devices.parse_visible_devices(value) == expected


def test_partition_gives_disjoint_consecutive_sets():
    assert devices.partition_gpus(2, 2, ["0", "1", "2", "3"]) == ["0,1", "2,3"]
    assert devices.partition_gpus(3, 1, ["0", "1", "2", "3"]) == ["0", "1", "2"]
    sets = devices.partition_gpus(4, 2, [str(i) for i in range(8)])
    flat = [g for s in sets for g in s.split(",")]
    assert len(flat) == len(set(flat)) == 8


def test_partition_respects_an_existing_cuda_visible_devices():
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    got = devices.gpu_env_per_worker(2, gpus_per_worker=2, environ=env, gpu_count=8)
    assert got == [{"CUDA_VISIBLE_DEVICES": "4,5"}, {"CUDA_VISIBLE_DEVICES": "6,7"}]
    # Unset: the machine's GPUs are numbered 0..n-1.
    got = devices.gpu_env_per_worker(2, gpus_per_worker=1, environ={}, gpu_count=2)
    assert got == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]


def test_too_few_gpus_is_a_clear_error_naming_the_numbers():
    with pytest.raises(ConfigError) as err:
        devices.gpu_env_per_worker(2, gpus_per_worker=2, environ={"CUDA_VISIBLE_DEVICES": "0,1,2"})
    assert "need 4 GPUs" in str(err.value) and "only 3 are visible" in str(err.value)
    with pytest.raises(ConfigError, match="only 0 are visible"):
        devices.gpu_env_per_worker(1, gpus_per_worker=1, environ={}, gpu_count=0)
    with pytest.raises(ConfigError, match=">= 1"):
        devices.partition_gpus(2, 0, ["0", "1"])


def test_cpu_with_gpus_is_a_usage_error_and_cpu_hides_gpus():
    with pytest.raises(ConfigError, match="--cpu and --gpus-per-worker"):
        devices.gpu_env_per_worker(2, cpu=True, gpus_per_worker=1, gpu_count=4)
    assert devices.gpu_env_per_worker(2, cpu=True) == [{"CUDA_VISIBLE_DEVICES": "-1"}] * 2


def test_shared_gpus_get_memory_growth():
    assert devices.gpu_env_per_worker(2, environ={}, gpu_count=1) == \
        [{"TF_FORCE_GPU_ALLOW_GROWTH": "true"}] * 2
    assert devices.gpu_env_per_worker(1, environ={}, gpu_count=1) == [{}]
    assert devices.gpu_env_per_worker(2, environ={}, gpu_count=0) == [{}, {}]


def test_count_machine_gpus_reads_the_driver_listing(tmp_path):
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / bus).mkdir()
    assert devices.count_machine_gpus(tmp_path) == 2
    assert devices.count_machine_gpus(tmp_path / "missing") == 0


def test_remote_hosts_number_their_own_gpus():
    assert devices.partition_gpus_by_host(["a", "b", "a"], 2) == ["0,1", "0,1", "2,3"]
