"""One real Ray cluster (a head and two worker nodes on loopback addresses, ray_nodes.py) for the
whole tier: the modules of tests/ray run on one xdist process (tests/_plugins/run_groups.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from mwnotebook.engine.loop import background_loop
from mwnotebook.launchers.ray.node_templates import notebook_templates
from testbed import ray_nodes


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[ray_nodes.RayTestCluster]:
    reason = ray_nodes.unavailable_reason()
    if reason:
        pytest.skip(reason)
    started = time.monotonic()
    cluster = ray_nodes.create()
    print(f"Ray test cluster at {cluster.address} up in {time.monotonic() - started:.1f} s: {cluster.log}; "
          f"its processes' PSS {cluster.rss_mib():.0f} MiB")
    old = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ.update(cluster.env())
    try:
        yield cluster
    finally:
        if old is None:
            os.environ.pop("RAY_USAGE_STATS_ENABLED", None)
        cluster.destroy()


def end_kept_templates() -> None:
    """End the node templates this process kept after its clusters stopped
    (launchers/ray/node_templates.py), and the Ray connection kept with them: each test starts as a
    fresh notebook would."""
    background_loop().run(notebook_templates().close(), timeout=60)


@pytest.fixture
def ray_env(ray_cluster: ray_nodes.RayTestCluster) -> Iterator[ray_nodes.RayTestCluster]:
    """The cluster with every worker node up (a node an earlier test killed is started again, under
    a new node id, and the GCS has given up the killed one), and afterwards, once the node templates
    kept by this process are ended, the check that no relay actor of ours is left on it."""
    restarted = False
    for node in ray_cluster.workers:
        if not ray_cluster.node_alive(node):
            ray_cluster.start_worker(node)
            restarted = True
    if restarted:
        print(f"Ray test cluster settled after a node's restart: {ray_cluster.wait_settled()}")
    yield ray_cluster
    end_kept_templates()
    deadline = time.monotonic() + 30
    while ray_cluster.actor_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = ray_cluster.actor_pids()
    assert not left, f"relay actors left on the Ray test cluster: {left}"
