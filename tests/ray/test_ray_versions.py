"""A real Ray cluster under another Python minor version than the notebook's: one head, started
with the notebook's Ray version installed into another Python (tools/test.sh makes that venv once
and exports MWNOTEBOOK_RAY_OTHER_PYTHON). ``Cluster(ray=...)`` (what ``%%mwtrain --ray`` and
``mwnotebook run --ray`` build) fails with a ClusterStartError naming both Python versions and what
to do, through the head's address and through Ray Client, before anything is placed; nothing of
ours is left: no actor, no placement group, no process."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mwnotebook import Cluster, ClusterStartError
from testbed import ray_nodes

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

#: The venv tools/test.sh makes (its default path, when the variable is not set).
DEFAULT_OTHER_PYTHON = Path.home() / ".cache/mwnotebook/ray-other-python/bin/python"
#: The start-up bound given to the notebook's cluster (a loaded machine, a Ray Client retry).
START_SECONDS = 150.0
#: How long Ray may take to end what a refused client made on the head (its client server's own).
LEFTOVER_SECONDS = 60.0


def other_python() -> tuple[Path, str] | None:
    """The other Python (with Ray) and its version, or None."""
    python = Path(os.environ.get("MWNOTEBOOK_RAY_OTHER_PYTHON") or DEFAULT_OTHER_PYTHON)
    if not python.exists():
        return None
    done = subprocess.run([str(python), "-c", "import platform, ray; print(platform.python_version(), ray.__version__)"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return None
    version, ray_version = done.stdout.split()
    import ray

    if ray_version != ray.__version__ or tuple(version.split(".")[:2]) == platform.python_version_tuple()[:2]:
        return None
    return python, version


@pytest.fixture(scope="module")
def other_cluster() -> Iterator[tuple[ray_nodes.RayTestCluster, Path, str]]:
    found = other_python()
    if found is None:
        pytest.skip("no Ray of the notebook's version under another Python minor version: tools/test.sh installs "
                    f"it ({DEFAULT_OTHER_PYTHON}, or MWNOTEBOOK_RAY_OTHER_PYTHON)")
    python, version = found
    started = time.monotonic()
    cluster = ray_nodes.create(worker_cpus=(), ray_bin=str(python.with_name("ray")))
    print(f"Ray head under Python {version} at {cluster.address} up in {time.monotonic() - started:.1f} s: "
          f"{cluster.log}")
    try:
        yield cluster, python, version
    finally:
        cluster.destroy()


def placement_groups(python: Path, address: str) -> list[str]:
    """The cluster's placement groups, asked by a driver of the cluster's own Python."""
    code = (f"import json, ray; ray.init(address={address!r}, log_to_driver=False);"
            "from ray.util import placement_group_table;"
            "print(json.dumps([g['state'] for g in placement_group_table().values()]))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def client_servers(cluster: ray_nodes.RayTestCluster) -> list[int]:
    """The head's running per-client servers (Ray starts one for each Ray Client that connects)."""
    pids = []
    for proc in cluster.processes():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and "--mode=specific-server" in proc.cmdline():
                pids.append(proc.pid)
        except psutil.Error:  # ended meanwhile
            continue
    return pids


@pytest.mark.parametrize("form", ["head", "client"])
def test_another_python_on_the_cluster_is_named_before_anything_starts(
        other_cluster: tuple[ray_nodes.RayTestCluster, Path, str], form: str) -> None:
    import ray

    cluster, python, version = other_cluster
    address = cluster.address if form == "head" else cluster.client_address
    ours = {p.pid for p in psutil.Process().children(recursive=True)}
    started = time.monotonic()
    with pytest.raises(ClusterStartError) as info:
        # a fresh head's first Ray Client server can die as it starts: the product connects once more
        # (launchers/ray/session.py CLIENT_SERVER_DIED), after Ray's ~40 s for the first try
        with Cluster(ray=address, cpu=True, startup_timeout=START_SECONDS) as notebook:
            notebook.start()
    took = time.monotonic() - started
    print(f"--ray {address} against Python {version}: the error after {took:.1f} s: {info.value}")
    text = str(info.value)
    assert text.startswith(f"--ray {address}: the notebook's Ray and Python must be the cluster's: Python "
                           f"{version} on the cluster, Python {platform.python_version()} here. "), \
        text + "\n" + cluster.log_tail("ray_client_server*")
    assert f"under Python {'.'.join(version.split('.')[:2])}" in text, text
    assert f"pip install 'ray=={ray.__version__}'" in text, text
    assert not ray.is_initialized()
    # and Ray's module is left as before: the notebook's next connection starts clean
    from ray._private import worker

    node = worker._global_node  # noqa: SLF001 (what Ray's next ray.init asserts is None)
    assert node is None and worker.global_worker.mode is None, (node, worker.global_worker.mode)
    # nothing left: no process of ours, no actor or placement group on the cluster, no client server
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in ours]
    assert not [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], left
    assert not cluster.actor_pids()
    assert placement_groups(python, cluster.address) == []
    deadline = time.monotonic() + LEFTOVER_SECONDS
    while client_servers(cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not client_servers(cluster), "the head's server for the refused Ray Client is still running"
