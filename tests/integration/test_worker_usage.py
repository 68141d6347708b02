"""A worker near its memory limit is flagged (engine/usage.py, ``Cluster.usage()``): a local
worker's kernel moved into a cgroup-v1 memory cgroup whose limit is just above its resident memory
(as a Slurm job's ``--mem`` puts it) is reported with that limit and ``near_limit``; the other worker,
left where it was, is not. One local two-worker cluster (no TensorFlow); ~10 s. Root (cgroups)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwnotebook import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@contextlib.contextmanager
def _memory_cgroup(pid: int, limit: int) -> Iterator[None]:
    """``pid`` moved into a new cgroup-v1 memory cgroup under its own, limited to ``limit`` bytes."""
    line = next((x for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if ":memory:" in x), None)
    parent = Path("/sys/fs/cgroup/memory") / (line.split(":", 2)[2].lstrip("/") if line else "")
    if os.geteuid() != 0 or line is None or not (parent / "cgroup.procs").exists():
        pytest.skip("needs root and a cgroup-v1 memory controller at /sys/fs/cgroup/memory")
    child = parent / f"mwtest-usage-{os.getpid()}"
    child.mkdir()
    try:
        (child / "memory.limit_in_bytes").write_text(str(limit))
        (child / "cgroup.procs").write_text(str(pid))
        yield
    finally:
        with contextlib.suppress(OSError):
            (parent / "cgroup.procs").write_text(str(pid))
        child.rmdir()


def test_a_worker_near_its_memory_limit_is_flagged() -> None:
    with Cluster(workers=2, cpu=True) as cluster:
        assert cluster.run("held = bytearray(200_000_000)\nheld[::4096] = b'x' * len(held[::4096])",
                           timeout=120).ok
        before = cluster.usage()
        rss = before[1].memory_bytes
        assert rss is not None and rss > 200e6, before
        limit = int(rss / 0.95) // 4096 * 4096
        with _memory_cgroup(before[1].pid or 0, limit):
            limited = cluster.usage()
    assert limited[1].memory_limit == limit and limited[1].near_limit, limited[1]
    assert limited[0].memory_limit is not None and limited[0].memory_limit > 4 * limit, limited[0]
    assert not limited[0].near_limit and not before[1].near_limit
