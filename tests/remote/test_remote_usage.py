"""CPU and memory of remote workers (``Cluster.usage()``: engine/usage.py): on the SSH test hosts
each worker's agent reads its kernel's /proc on its host (processes/shipped/remote_agent.py, the
``usage`` command). Checked against /proc read in the host's own namespace: resident memory within
5 %, and the CPU share of a cell that spins for 3 s against the CPU seconds /proc counted meanwhile;
and the memory limit: these hosts see no cgroup (``ip netns exec`` mounts a fresh /sys), so it is
their /proc/meminfo's MemTotal (a cgroup's limit: tests/integration/test_worker_usage.py).
While a cell runs, the same figures come every 2 s as events for the status table under the cell.
One two-host cluster; ~30 s."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from mwnotebook import Cluster
from mwnotebook.shared.events import WorkerResources
from testbed import netns_hosts
from testbed.netns_hosts import CHECKOUT

#: Hang bounds only, generous for a loaded 2-core machine.
pytestmark = [pytest.mark.remote, pytest.mark.slow, pytest.mark.timeout(400)]

HOLD = '''import numpy as np
held = np.ones(40_000_000)  # 320 MB, resident
'''
SPIN = '''import time
end = time.process_time() + 3
while time.process_time() < end:
    pass
'''


def _proc(host: netns_hosts.TestHost, pid: int) -> tuple[int, float]:
    """Resident bytes and CPU seconds of ``pid``, as /proc says in the host's namespace."""
    statm = host.exec("cat", f"/proc/{pid}/statm").stdout.split()
    stat = host.exec("cat", f"/proc/{pid}/stat").stdout.rsplit(")", 1)[1].split()
    return int(statm[1]) * os.sysconf("SC_PAGE_SIZE"), (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def test_remote_workers_cpu_and_memory_match_proc_on_their_hosts(ssh_home: netns_hosts.TestNet) -> None:
    hosts = tuple(h.alias for h in ssh_home.hosts)
    with Cluster(hosts=hosts, cpu=True, env={"PYTHONPATH": CHECKOUT}) as cluster:
        cluster.start()
        assert cluster.run(HOLD, timeout=300).ok
        first = cluster.usage()
        before = [_proc(host, u.pid) for host, u in zip(ssh_home.hosts, first) if u.pid is not None]
        started = time.monotonic()
        events: list[Any] = []
        assert cluster.run(SPIN, on_event=events.append, timeout=300).ok
        after = [_proc(host, u.pid) for host, u in zip(ssh_home.hosts, first) if u.pid is not None]
        second = cluster.usage()
        elapsed = time.monotonic() - started
        memtotal = [int(next(x for x in h.exec("cat", "/proc/meminfo").stdout.splitlines()
                             if x.startswith("MemTotal:")).split()[1]) * 1024 for h in ssh_home.hosts]
    assert [u.host for u in first] == list(hosts) and len(before) == len(after) == 2, first
    for u, (rss, _) in zip(first, before):
        assert u.memory_bytes is not None and u.note == "", u
        assert u.memory_bytes > 300e6 and abs(u.memory_bytes - rss) <= 0.05 * rss, (u, rss)
    for u, (_, cpu0), (_, cpu1) in zip(second, before, after):
        assert u.cpu_percent is not None, u
        # the CPU seconds /proc counted while the cell spun, over (at least) the time it took
        expected = 100.0 * (cpu1 - cpu0) / elapsed
        assert cpu1 - cpu0 >= 2.5 and abs(u.cpu_percent - expected) <= max(20.0, 0.3 * expected), (u, expected)
    # these hosts (network namespaces entered with ip netns exec) see no cgroup: their limit is MemTotal
    assert [u.memory_limit for u in second] == memtotal and not any(u.near_limit for u in second), second
    # while the cell ran, each worker's figures came as events (the status table's CPU and memory)
    for i, (rss, _) in enumerate(after):
        seen = [e for e in events if isinstance(e, WorkerResources) and e.worker == i]
        assert seen and seen[-1].memory_bytes is not None and abs(seen[-1].memory_bytes - rss) <= 0.05 * rss, seen
