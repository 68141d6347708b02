"""CPU and memory of Ray workers (``Cluster.usage()``, engine/usage.py) on the tier's real Ray
cluster (testbed/ray_nodes.py): each worker's agent, started by its bundle's relay actor
(launchers/ray/node_relay.py), reads its kernel's /proc on its node, as on SSH and Slurm hosts. The
test nodes are loopback addresses of this machine, so the same /proc is read here to check: resident
memory within 5 %, the CPU share of a 3 s spin against the CPU seconds /proc counted meanwhile; the
memory limit is the node's (this machine's MemTotal or its memory cgroup's limit); and while a cell
runs the same figures come as events for the status table under the cell. One two-worker cluster."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from mwnotebook import Cluster
from mwnotebook.processes.shipped.proc_usage import memory_limit
from mwnotebook.shared.events import WorkerResources
from testbed import ray_nodes

#: Hang bounds only, generous for a loaded 2-core machine.
pytestmark = [pytest.mark.ray, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]

HOLD = '''import numpy as np
held = np.ones(40_000_000)  # 320 MB, resident
'''
SPIN = '''import time
end = time.process_time() + 3
while time.process_time() < end:
    pass
'''


def _proc(pid: int) -> tuple[int, float]:
    """Resident bytes and CPU seconds of ``pid``, as /proc says (the nodes share this machine's)."""
    with open(f"/proc/{pid}/statm") as f:
        resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read().rsplit(")", 1)[1].split()
    return resident, (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def test_ray_workers_cpu_and_memory_match_proc(ray_env: ray_nodes.RayTestCluster) -> None:
    with Cluster(ray=ray_env.address, cpu=True) as cluster:
        cluster.start()
        assert cluster.run(HOLD, timeout=300).ok
        first = cluster.usage()
        pids = [u.pid for u in first]
        assert all(pid is not None for pid in pids), first
        before = [_proc(pid) for pid in pids if pid is not None]
        started = time.monotonic()
        events: list[Any] = []
        assert cluster.run(SPIN, on_event=events.append, timeout=300).ok
        after = [_proc(pid) for pid in pids if pid is not None]
        second = cluster.usage()
        elapsed = time.monotonic() - started
        nodes = [info.host for info in cluster.status()]
        limits = [memory_limit(pid) for pid in pids if pid is not None]
    assert [u.host for u in first] == nodes and sorted(nodes) == sorted(n.ip for n in ray_env.workers), (first, nodes)
    for u, (rss, _) in zip(first, before):
        assert u.memory_bytes is not None and u.note == "", u
        assert u.memory_bytes > 300e6 and abs(u.memory_bytes - rss) <= 0.05 * rss, (u, rss)
    for u, (_, cpu0), (_, cpu1) in zip(second, before, after):
        assert u.cpu_percent is not None, u
        expected = 100.0 * (cpu1 - cpu0) / elapsed  # over (at least) the time the cell took
        assert cpu1 - cpu0 >= 2.5 and abs(u.cpu_percent - expected) <= max(20.0, 0.3 * expected), (u, expected)
    assert [u.memory_limit for u in second] == limits and not any(u.near_limit for u in second), second
    for i, (rss, _) in enumerate(after):
        seen = [e for e in events if isinstance(e, WorkerResources) and e.worker == i]
        assert seen and seen[-1].memory_bytes is not None and abs(seen[-1].memory_bytes - rss) <= 0.05 * rss, seen
