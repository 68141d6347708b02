"""Fixtures shared by every test layer."""

from __future__ import annotations

import time

import psutil
import pytest


def worker_processes() -> list[psutil.Process]:
    """Every live mwnotebook worker kernel on this machine."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if "mwnotebook.worker_kernel" in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_for_no_workers(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Wait until none of ``pids`` is a live worker; return those still alive at the end."""
    deadline = time.monotonic() + timeout
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p.pid for p in worker_processes()} & pids
        if alive:
            time.sleep(0.1)
    return alive


@pytest.fixture
def no_orphans():
    """Fails the test if it leaves worker kernels behind that it did not have before."""
    before = {p.pid for p in worker_processes()}
    yield
    left = wait_for_no_workers({p.pid for p in worker_processes()} - before, timeout=10)
    assert not left, f"worker processes left behind: {sorted(left)}"
