"""Which workers one worker template can serve (pure logic of launchers/local/template_pool.py)."""

from __future__ import annotations

from mwnotebook.config.options import add_cluster_arguments, spec_from_options
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import worker_envs
from mwnotebook.launchers.local.template_pool import startup_key, template_env

BASE = {"PATH": "/usr/bin", "PYTHONPATH": "/src", "TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}


def test_per_worker_values_do_not_change_the_template():
    spec = ClusterSpec(workers=4, cpu=True)
    addresses = [f"127.0.0.1:{2000 + i}" for i in range(4)]
    keys = {startup_key("/py", True, {**BASE, **worker_envs(spec, addresses)[i]}) for i in range(4)}
    assert len(keys) == 1  # TF_CONFIG, the worker index and CUDA_VISIBLE_DEVICES are set after the fork
    one = ClusterSpec(workers=1)  # no TF_FORCE_GPU_ALLOW_GROWTH (read when GPUs initialise, not at load)
    two = ClusterSpec(workers=2)
    assert startup_key("/py", True, {**BASE, **worker_envs(one, addresses[:1])[0]}) == \
        startup_key("/py", True, {**BASE, **worker_envs(two, addresses[:2])[0]})


def test_load_time_variables_need_their_own_template():
    key = startup_key("/py", True, BASE)
    assert startup_key("/py", True, {**BASE, "TF_XLA_FLAGS": "--tf_xla_cpu_global_jit"}) != key
    assert startup_key("/py", True, {**BASE, "TF_USE_LEGACY_KERAS": "0"}) != key
    assert startup_key("/py", True, {**BASE, "PYTHONPATH": "/other"}) != key
    assert startup_key("/other/python", True, BASE) != key
    assert startup_key("/py", False, BASE) != key  # host network vs private namespace


def test_other_variables_are_set_in_the_child():
    key = startup_key("/py", True, BASE)
    assert startup_key("/py", True, {**BASE, "DATA_DIR": "/data", "PATH": "/bin"}) == key


def test_template_environment_has_no_per_worker_values():
    env = template_env({**BASE, "TF_CONFIG": "{}", "CUDA_VISIBLE_DEVICES": "0", "MWNOTEBOOK_WORKER_INDEX": "1",
                        "MWNOTEBOOK_PARENT_PID": "7"})
    assert env == BASE


def test_no_template_option():
    import argparse

    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    assert spec_from_options(parser.parse_args([])).template is True
    assert spec_from_options(parser.parse_args(["--no-template"])).template is False
    # The workers are the same either way: a running cluster serves both.
    assert ClusterSpec(template=False) == ClusterSpec()
