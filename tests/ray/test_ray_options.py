"""The --ray options and the connection's error sentences: pure logic, no Ray cluster."""

from __future__ import annotations

import shlex

import pytest

from mwnotebook import ClusterSpec
from mwnotebook.config.options import add_cluster_arguments, spec_from_options
from mwnotebook.errors import ConfigError
from mwnotebook.launchers.ray.session import head_endpoint, init_error


def test_the_options_give_the_ray_fields() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    line = "--workers 3 --ray 10.0.0.5:6379 --ray-strategy strict_spread --cpus-per-worker 2 --cpu"
    spec = spec_from_options(parser.parse_args(shlex.split(line)))
    assert (spec.ray, spec.ray_strategy, spec.cpus_per_worker, spec.workers) == ("10.0.0.5:6379", "STRICT_SPREAD", 2, 3)


@pytest.mark.parametrize(("fields", "message"), [
    ({"ray": ""}, "--ray needs the cluster's address"),
    ({"ray": "headnode"}, "give auto, HEAD_HOST:PORT"),
    ({"ray": "h:6379", "hosts": ("a", "b")}, "--ray and --hosts conflict"),
    ({"ray": "h:6379", "slurm": "-N 2"}, "--ray and --slurm/--slurm-job conflict"),
    ({"ray": "h:6379", "network": "private"}, "--network private applies to local workers only"),
    ({"ray": "h:6379", "ray_strategy": "RANDOM"}, "--ray-strategy must be one of SPREAD"),
    ({"ray": "h:6379", "cpus_per_worker": 0}, "--cpus-per-worker must be a whole number >= 1"),
    ({"cpus_per_worker": 2}, "--cpus-per-worker only applies together with --ray"),
    ({"ray_strategy": "PACK"}, "--ray-strategy only applies together with --ray"),
])
def test_bad_ray_options_are_named(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterSpec(**fields)  # type: ignore[arg-type]


def test_the_head_endpoint_of_each_address_form() -> None:
    assert head_endpoint("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert head_endpoint("ray://head.example:10001") == ("head.example", 10001)
    assert head_endpoint("auto") is None


def test_a_version_mismatch_says_what_to_install() -> None:
    exc = RuntimeError("Version mismatch: The cluster was started with:\n    Ray: 2.59.0\n    Python: 3.11.7\n"
                       "This process on node 10.0.0.9 was started with:\n    Ray: 2.60.0\n    Python: 3.11.7\n")
    text = str(init_error("10.0.0.5:6379", exc))
    assert "the notebook's Ray or Python version differs from the cluster's" in text
    assert "pip install 'ray==X.Y.Z'" in text


def test_a_connection_failure_names_ray_client_and_the_head_logs() -> None:
    text = str(init_error("10.0.0.5:6379", ConnectionError("Could not find any running Ray instance")))
    assert "--ray ray://HEAD_HOST:10001" in text and "raylet.out" in text



def test_the_ray_launcher_declares_what_it_has() -> None:
    """A Ctrl-C ends a wait for Ray's placement; a lost node's bundle is placed again. Made without
    connecting (Ray is imported, nothing is reached until the first start)."""
    from mwnotebook.launchers.capabilities import AbortsStart, Isolates, ReplacesNodes
    from mwnotebook.launchers.ray.launcher import RayLauncher

    launcher = RayLauncher.from_spec(ClusterSpec(ray="127.0.0.1:6379", workers=2, cpus_per_worker=2))
    assert isinstance(launcher, AbortsStart) and isinstance(launcher, ReplacesNodes)
    assert not isinstance(launcher, Isolates)
    assert (launcher.workers, launcher.cpus, launcher.strategy) == (2, 2, "SPREAD")
