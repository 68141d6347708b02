"""The --ray options and the connection's error sentences: pure logic, no Ray cluster."""

from __future__ import annotations

import platform
import shlex

import pytest

from mwnotebook import ClusterSpec
from mwnotebook.config.options import add_cluster_arguments, spec_from_options
from mwnotebook.errors import ConfigError
from mwnotebook.launchers.ray.session import head_endpoint, init_error, resolve_address

pytestmark = pytest.mark.ray


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


def test_auto_is_ray_address_when_it_is_set() -> None:
    assert resolve_address("auto", {"RAY_ADDRESS": "10.0.0.5:6379"}) == "10.0.0.5:6379"
    assert resolve_address("auto", {"RAY_ADDRESS": " "}) == "auto"
    assert resolve_address("auto", {}) == "auto"
    assert resolve_address("10.0.0.7:6379", {"RAY_ADDRESS": "10.0.0.5:6379"}) == "10.0.0.7:6379"


def test_auto_without_a_cluster_says_what_to_give() -> None:
    exc = ConnectionError("Could not find any running Ray instance. Please specify the one to connect to by "
                          "setting `--address` flag or `RAY_ADDRESS` environment variable.")
    text = str(init_error("auto", exc, "auto"))
    assert text.startswith("--ray auto: no Ray cluster runs on this machine and RAY_ADDRESS is not set"), text
    assert "--ray HEAD_HOST:6379" in text
    # auto that stood for RAY_ADDRESS names it
    text = str(init_error("auto", ConnectionError("GCS gone"), "10.0.0.5:6379"))
    assert text.startswith("--ray auto (RAY_ADDRESS=10.0.0.5:6379): could not connect"), text


def ray_mismatch_text(cluster_ray: str, cluster_python: str, where: str) -> str:
    """Ray's own text for a mismatch, from Ray's own check (what ``ray.init`` raises)."""
    from ray._private.utils import check_version_info

    with pytest.raises(RuntimeError) as info:
        check_version_info({"ray_version": cluster_ray, "python_version": cluster_python}, where)
    return str(info.value)


def test_a_python_minor_mismatch_names_both_versions_and_what_to_install() -> None:
    import ray

    here = platform.python_version()
    other = "3.12.1" if not here.startswith("3.12.") else "3.11.7"
    text = str(init_error("10.0.0.5:6379", RuntimeError(ray_mismatch_text(ray.__version__, other, "node 10.0.0.9"))))
    assert text == (f"--ray 10.0.0.5:6379: the notebook's Ray and Python must be the cluster's: Python {other} on "
                    f"the cluster, Python {here} here. Run the notebook's kernel under Python {other[:4]} (the "
                    f"cluster's {other}) with pip install 'ray=={ray.__version__}' 'mwnotebook[ray]'"), text


def test_a_ray_mismatch_through_ray_client_names_both() -> None:
    import ray

    here = platform.python_version()
    text = str(init_error("ray://h:10001", RuntimeError(ray_mismatch_text("2.59.0", here, "Ray Client"))))
    assert f"Ray 2.59.0 on the cluster, Ray {ray.__version__} here." in text, text
    assert f"Python {here} here" not in text and "pip install 'ray==2.59.0'" in text, text


def test_a_patch_mismatch_says_how_a_driver_may_keep_its_python() -> None:
    import ray

    major, minor, patch = platform.python_version_tuple()
    other = f"{major}.{minor}.{int(patch) + 1}"
    text = str(init_error("h:6379", RuntimeError(ray_mismatch_text(ray.__version__, other, "node h"))))
    assert f"Python {other} on the cluster, Python {platform.python_version()} here" in text, text
    assert "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor" in text and "ray://HEAD_HOST:10001" in text, text


def test_a_connection_failure_names_ray_client_and_the_head_logs() -> None:
    text = str(init_error("10.0.0.5:6379", ConnectionError("Could not find any running Ray instance")))
    assert "--ray ray://HEAD_HOST:10001" in text and "raylet.out" in text



def test_a_ray_client_failure_shows_the_servers_own_line() -> None:
    """Ray Client's failure is a header with the head's traceback after it: the sentence keeps the
    traceback's last line, which names the head's log."""
    exc = ConnectionAbortedError(
        "Initialization failure from server:\nTraceback (most recent call last):\n  File \"proxier.py\", "
        "line 779, in Datapath\n    raise RuntimeError(\nRuntimeError: Proxy failed to Connect to backend! "
        "Check `ray_client_server.err` and `ray_client_server_23000.err` on the head node\n")
    text = str(init_error("ray://10.0.0.5:10001", exc))
    assert text.startswith("--ray ray://10.0.0.5:10001: could not connect to the Ray cluster: Initialization "
                           "failure from server: RuntimeError: Proxy failed to Connect to backend! Check "
                           "`ray_client_server.err`"), text
    assert "connect through Ray Client" not in text


def test_a_ray_client_server_that_died_as_it_started_is_worth_one_more_try() -> None:
    """Ray's texts (util/client/server/proxier.py) for a head-side server that died as it started;
    a version mismatch or an unreachable head is not retried."""
    from mwnotebook.launchers.ray.session import client_server_died

    assert client_server_died("Initialization failure from server:\nTraceback ...\nRuntimeError: Starting Ray "
                              "client server failed. See ray_client_server_23000.err for detailed logs.")
    assert client_server_died("Initialization failure from server:\n... SpecificServer startup failed for client")
    assert not client_server_died("Version mismatch: The cluster was started with:\n    Ray: 2.60.0\n")
    assert not client_server_died("Proxy failed to Connect to backend!")


def test_the_ray_launcher_declares_what_it_has() -> None:
    """A Ctrl-C ends a wait for Ray's placement; a lost node's bundle is placed again. Made without
    connecting (Ray is imported, nothing is reached until the first start)."""
    from mwnotebook.launchers.capabilities import AbortsStart, Isolates, ReplacesNodes
    from mwnotebook.launchers.ray.launcher import RayLauncher

    launcher = RayLauncher.from_spec(ClusterSpec(ray="127.0.0.1:6379", workers=2, cpus_per_worker=2))
    assert isinstance(launcher, AbortsStart) and isinstance(launcher, ReplacesNodes)
    assert not isinstance(launcher, Isolates)
    assert (launcher.workers, launcher.cpus, launcher.strategy) == (2, 2, "SPREAD")
