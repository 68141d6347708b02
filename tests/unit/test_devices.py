"""GPU partitioning per worker (pure: no GPU, no TensorFlow)."""

from __future__ import annotations

import pytest

from mwnotebook.config import devices
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


def vis(workers: int, gpus: int, environ: dict[str, str], gpu_count: int | None = None) -> list[str | None]:
    from mwnotebook import ClusterSpec

    return devices.visible_devices_per_worker(ClusterSpec(workers=workers, gpus_per_worker=gpus),
                                              environ=environ, gpu_count=gpu_count)


def test_partition_respects_an_existing_cuda_visible_devices():
    assert vis(2, 2, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, gpu_count=8) == ["4,5", "6,7"]
    # Unset: the machine's GPUs are numbered 0..n-1.
    assert vis(2, 1, {}, gpu_count=2) == ["0", "1"]


def test_too_few_gpus_is_a_clear_error_naming_the_numbers():
    with pytest.raises(ConfigError) as err:
        vis(2, 2, {"CUDA_VISIBLE_DEVICES": "0,1,2"})
    assert "need 4 GPUs" in str(err.value) and "only 3 are visible" in str(err.value)
    with pytest.raises(ConfigError, match="only 0 are visible"):
        vis(1, 1, {}, gpu_count=0)
    with pytest.raises(ConfigError, match=">= 1"):
        devices.partition_gpus(2, 0, ["0", "1"])


def test_cpu_with_gpus_is_a_usage_error_and_cpu_hides_gpus():
    from mwnotebook import ClusterSpec

    with pytest.raises(ConfigError, match="--cpu and --gpus-per-worker"):
        ClusterSpec(workers=2, cpu=True, gpus_per_worker=1)
    assert devices.visible_devices_per_worker(ClusterSpec(workers=2, cpu=True)) == ["-1", "-1"]


def test_count_machine_gpus_reads_the_driver_listing(tmp_path):
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / bus).mkdir()
    assert devices.count_machine_gpus(tmp_path) == 2
    assert devices.count_machine_gpus(tmp_path / "missing", nvidia_smi=None) == 0
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-a)'\n"
                    "echo '  MIG 1g.18gb Device 0: (UUID: MIG-b)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-c)'\n")
    fake.chmod(0o755)
    assert devices.count_machine_gpus(tmp_path / "missing", nvidia_smi=str(fake)) == 2


def test_remote_hosts_number_their_own_gpus():
    assert devices.partition_gpus_by_host(["a", "b", "a"], 2) == ["0,1", "0,1", "2,3"]


def test_visible_devices_per_worker_from_a_cluster_spec():
    from mwnotebook import ClusterSpec

    two = ClusterSpec(workers=2, gpus_per_worker=2)
    assert devices.visible_devices_per_worker(two, environ={"CUDA_VISIBLE_DEVICES": "3,2,1,0"}) == \
        ["3,2", "1,0"]
    with pytest.raises(ConfigError, match="need 4 GPUs"):
        devices.visible_devices_per_worker(two, environ={}, gpu_count=2)
    assert devices.visible_devices_per_worker(ClusterSpec(workers=2, cpu=True)) == ["-1", "-1"]
    assert devices.visible_devices_per_worker(ClusterSpec(workers=2), gpu_count=4) == [None, None]
    remote = ClusterSpec(workers=3, gpus_per_worker=1, hosts=("a*2", "b"))
    assert devices.visible_devices_per_worker(remote, environ={}, gpu_count=0) == ["0", "1", "0"]


def test_shared_gpus_get_memory_growth_through_the_recipes():
    from mwnotebook import ClusterSpec
    from mwnotebook.config.worker_env import recipe_env

    assert recipe_env(ClusterSpec(workers=2)) == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert recipe_env(ClusterSpec(workers=1)) == {}
    assert recipe_env(ClusterSpec(workers=2, gpus_per_worker=1)) == {}
    assert recipe_env(ClusterSpec(workers=2, cpu=True)) == {}
    # The user's own --env value wins.
    assert recipe_env(ClusterSpec(workers=2, env={"TF_FORCE_GPU_ALLOW_GROWTH": "false"})) == {}
