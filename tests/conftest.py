"""Fixtures and hooks shared by every test tier. A test never imports a conftest: shared helpers are
in the test bed (testbed/) or tests/_shared (tests/unit/test_import_rules.py)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from testbed.netns_hosts import peer_namespace
from testbed.processes import WORKER_MODULES, wait_gone, worker_processes

# The CI rule that every skip fails (when MWNOTEBOOK_NO_SKIPS=1): hooks, imported to be found here.
from ._plugins.no_skips import pytest_make_collect_report, pytest_runtest_makereport

# The reliability table, printed by the process that prints the summary: hooks, imported likewise.
from ._plugins.reliability_table import pytest_configure, pytest_terminal_summary
from ._plugins.run_groups import GroupClock, group_of, load_durations, longest_first, under_xdist

__all__ = ["pytest_configure", "pytest_make_collect_report", "pytest_runtest_makereport", "pytest_terminal_summary"]


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks into each test's id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put every test in its module's xdist group (tests/_plugins/run_groups.py): a module runs whole
    on one process, and modules that share a machine-wide resource run on the same one."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(Path(str(item.fspath)))))
    if under_xdist():  # every worker orders alike (xdist checks): longest measured group first
        items[:] = longest_first(items, load_durations())


_GROUP_CLOCK = pytest.StashKey[GroupClock]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_GROUP_CLOCK] = GroupClock(session.config.rootpath)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In the process that prints the summary, each xdist worker's report (``report.node``): its seconds
    go to its group's and its process's sums (tests/_plugins/run_groups.py)."""
    node = getattr(report, "node", None)
    config = getattr(node, "config", None)
    if node is not None and config is not None and _GROUP_CLOCK in config.stash:
        config.stash[_GROUP_CLOCK].add(report.nodeid, report.duration, node.gateway.id)


def pytest_sessionfinish(session: pytest.Session) -> None:
    clock = session.config.stash.get(_GROUP_CLOCK, None)
    if clock is not None and clock.groups:
        clock.write(session.config.rootpath / "artifacts" / "group_durations.json")


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


@pytest.fixture
def no_orphans():
    """Fails the test if it leaves worker kernels behind that it did not have before."""
    before = {p.pid for p in worker_processes()}
    yield
    left, _ = wait_gone({p.pid for p in worker_processes()} - before, 10, WORKER_MODULES)
    assert not left, f"worker processes left behind: {sorted(left)}"


@pytest.fixture(scope="module")
def peer_host() -> Iterator[str]:
    """A second 'machine' for the network isolation tests (tests/integration, tests/tf): a network
    namespace linked to this one by a veth pair (testbed/netns_hosts.py ``peer_namespace``)."""
    with ExitStack() as stack:
        try:
            name = stack.enter_context(peer_namespace())
        except RuntimeError as exc:
            pytest.skip(str(exc))
        yield name
