"""CPU and memory of workers on the test Slurm's nodes (``Cluster.usage()``: engine/usage.py): each
worker's agent, a job step on its node, reads its kernel's /proc there (processes/shipped/
remote_agent.py ``usage``). Checked against /proc read in the node's own namespace: resident memory
within 5 %, a 3 s spin's CPU share against the CPU seconds /proc counted meanwhile, and the memory
limit at most the node's MemTotal. One two-node job; ~30 s."""

from __future__ import annotations

import os
import time

import pytest

from mwnotebook import Cluster
from testbed import slurm_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(400)]

HOLD = "import numpy as np\nheld = np.ones(40_000_000)  # 320 MB, resident\n"
SPIN = "import time\nend = time.process_time() + 3\nwhile time.process_time() < end:\n    pass\n"


def _proc(node: slurm_cluster.netns_hosts.TestHost, pid: int) -> tuple[int, float, int]:
    """Resident bytes and CPU seconds of ``pid`` and the node's MemTotal, as /proc says on the node."""
    statm = node.exec("cat", f"/proc/{pid}/statm").stdout.split()
    stat = node.exec("cat", f"/proc/{pid}/stat").stdout.rsplit(")", 1)[1].split()
    total = next(x for x in node.exec("cat", "/proc/meminfo").stdout.splitlines() if x.startswith("MemTotal:"))
    return (int(statm[1]) * os.sysconf("SC_PAGE_SIZE"), (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK"),
            int(total.split()[1]) * 1024)


def test_slurm_workers_cpu_and_memory_match_proc_on_their_nodes(slurm_env: slurm_cluster.SlurmCluster) -> None:
    nodes = slurm_env.nodes
    with Cluster(slurm="-N 2", cpu=True) as cluster:
        assert cluster.run(HOLD, timeout=300).ok
        first = cluster.usage()
        before = [_proc(node, u.pid or 0) for node, u in zip(nodes, first)]
        started = time.monotonic()
        assert cluster.run(SPIN, timeout=300).ok
        after = [_proc(node, u.pid or 0) for node, u in zip(nodes, first)]
        second = cluster.usage()
        elapsed = time.monotonic() - started
    assert [u.host for u in first] == slurm_env.node_names, first
    for u, (rss, _, total) in zip(first, before):
        assert u.memory_bytes is not None and u.note == "", u
        assert u.memory_bytes > 300e6 and abs(u.memory_bytes - rss) <= 0.05 * rss, (u, rss)
        assert u.memory_limit is not None and 0 < u.memory_limit <= total and not u.near_limit, (u, total)
    for u, (_, cpu0, _), (_, cpu1, _) in zip(second, before, after):
        assert u.cpu_percent is not None, u
        expected = 100.0 * (cpu1 - cpu0) / elapsed
        assert cpu1 - cpu0 >= 2.5 and abs(u.cpu_percent - expected) <= max(20.0, 0.3 * expected), (u, expected)
