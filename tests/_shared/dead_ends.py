"""After a failed restart: what is true between the cells, checked alike for local workers
(tests/integration/test_no_dead_ends.py) and over SSH (tests/remote/test_no_dead_ends_ssh.py)."""

from __future__ import annotations

from mwnotebook import Cluster

#: A cell each fresh kernel answers with its index.
FRESH = "print('fresh', __import__('os').environ['MWNOTEBOOK_WORKER_INDEX'])"


def assert_nothing_runs(cluster: Cluster, kernels: int = 2) -> None:
    """The truth between the cells after a failed restart: nothing runs, and the status says so."""
    assert not cluster.started
    assert [(s.state, s.alive, s.pid) for s in cluster.status()] == [("stopped", False, None)] * kernels


def assert_runs_afresh(cluster: Cluster, old_pids: set[int | None], kernels: int = 2) -> None:
    """The next cell starts a fresh cluster by itself: every kernel answers, none of them an old
    one, and the status says they are alive and done."""
    result = cluster.run(FRESH)
    assert [result.stdout(i) for i in range(kernels)] == [f"fresh {i}\n" for i in range(kernels)]
    assert all(s.alive and s.state == "done" for s in cluster.status())
    assert not old_pids & {s.pid for s in cluster.status()}
