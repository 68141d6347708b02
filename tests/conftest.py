"""Fixtures shared by every test layer."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from testbed.processes import WORKER_MODULES, alive_workers, is_worker

# The CI rule that every skip fails (when MWNOTEBOOK_NO_SKIPS=1): hooks, imported to be found here.
from ._plugins.no_skips import pytest_make_collect_report, pytest_runtest_makereport

# The reliability table, printed by the process that prints the summary: hooks, imported likewise.
from ._plugins.reliability_table import pytest_configure, pytest_terminal_summary
from ._plugins.run_groups import group_of

# The process helpers are imported from here by the tiers' conftests.
__all__ = ["WORKER_MODULES", "alive_workers", "is_worker", "pytest_configure", "pytest_make_collect_report",
           "pytest_runtest_makereport", "pytest_terminal_summary"]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks into each test's id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put every test in its module's xdist group (tests/_plugins/run_groups.py): a module runs whole
    on one process, and modules that share a machine-wide resource run on the same one."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(Path(str(item.fspath)))))


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """For tests that press Ctrl-C on this process (``os.kill(os.getpid(), SIGINT)``): SIGINT raises
    here as in a terminal or a notebook kernel. A shell without job control starts a background
    command (``bash .ci/run &``, ``nohup``) with SIGINT ignored, and Python keeps an ignored SIGINT
    ignored: the Ctrl-C then never arrives and the test waits out its cell (seen: both Ctrl-C tests
    of tests/integration/test_plain_workers.py failed "DID NOT RAISE" in a backgrounded run)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def worker_processes() -> list[psutil.Process]:
    """Live mwnotebook worker kernels started (directly or not) by this test process.

    Other test runs on the same machine have workers of their own; those are not ours to count.
    """
    return [p for p in psutil.Process().children(recursive=True) if is_worker(p)]


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
