"""Fixtures shared by every test layer."""

from __future__ import annotations

import time

import psutil
import pytest

# The CI rule that every skip fails (when MWNOTEBOOK_NO_SKIPS=1): hooks, imported to be found here.
from ._shared.no_skips import pytest_make_collect_report, pytest_runtest_makereport

__all__ = ["pytest_make_collect_report", "pytest_runtest_makereport"]

WORKER_MODULES = ("mwnotebook.processes.worker_kernel",)


def is_worker(proc: psutil.Process, modules: tuple[str, ...] = WORKER_MODULES) -> bool:
    """A live (not zombie) process running one of mwnotebook's ``modules``."""
    try:
        cmd = proc.cmdline()
        return any(m in cmd for m in modules) and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def worker_processes() -> list[psutil.Process]:
    """Live mwnotebook worker kernels started (directly or not) by this test process.

    Other test runs on the same machine have workers of their own; those are not ours to count.
    """
    return [p for p in psutil.Process().children(recursive=True) if is_worker(p)]


def alive_workers(pids: set[int], modules: tuple[str, ...] = WORKER_MODULES) -> set[int]:
    """Those of ``pids`` that are still live mwnotebook processes, wherever they were reparented."""
    alive = set()
    for pid in pids:
        try:
            if is_worker(psutil.Process(pid), modules):
                alive.add(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def wait_for_no_workers(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Wait until none of ``pids`` is a live worker; return those still alive at the end."""
    deadline = time.monotonic() + timeout
    alive = alive_workers(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = alive_workers(alive)
    return alive


@pytest.fixture
def no_orphans():
    """Fails the test if it leaves worker kernels behind that it did not have before."""
    before = {p.pid for p in worker_processes()}
    yield
    left = wait_for_no_workers({p.pid for p in worker_processes()} - before, timeout=10)
    assert not left, f"worker processes left behind: {sorted(left)}"
