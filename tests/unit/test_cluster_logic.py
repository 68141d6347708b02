"""Group logic with a fake launcher: a failed start leaves nothing behind."""

import asyncio

import pytest

from mwnotebook import AsyncCluster, ClusterStartError, ClusterStateError
from mwnotebook.engine.cell.diagnose import diagnose
from tests._shared.fakes import FakeHandle


class FailingLauncher:
    """Starts worker 0, fails on worker 1."""

    def __init__(self):
        self.handles = []
        self.closed = False

    async def tf_addresses(self, count):
        return [f"127.0.0.1:{1000 + i}" for i in range(count)]

    async def start(self, index, env):
        if index == 1:
            raise ClusterStartError("no such interpreter", worker=1)
        handle = FakeHandle(index, host="fake")
        self.handles.append(handle)
        return handle

    async def close(self):
        self.closed = True


def test_failed_start_kills_started_workers_and_closes_the_launcher():
    launcher = FailingLauncher()
    cluster = AsyncCluster(workers=2, launcher=launcher)
    with pytest.raises(ClusterStartError, match="no such interpreter"):
        asyncio.run(cluster.start())
    # Worker 0 started before worker 1 failed: exactly that one handle, and it was killed.
    assert [h.index for h in launcher.handles] == [0]
    assert all(h.killed for h in launcher.handles)
    assert launcher.closed
    assert not cluster.started


def test_run_without_start_is_a_state_error():
    with pytest.raises(ClusterStateError, match="no cluster is running"):
        asyncio.run(AsyncCluster(workers=1).run("pass"))


def test_diagnoses():
    d = diagnose("RuntimeError", "Collective ops must be configured at program startup")
    assert d is not None and d.needs_restart and "strategy first" in d.hint
    d = diagnose("ModuleNotFoundError", "No module named 'tensorflow'")
    assert d is not None and "not installed" in d.hint
    assert diagnose("ValueError", "boom") is None


def test_events_reach_the_callers_thread_only_when_someone_observes_them(monkeypatch):
    """Without an observer the core gets no sink (its events never wake the caller's thread);
    with one, every event arrives, in order, even when several were queued at once. (The clusters
    panel's publication, mwnotebook/registry/, observes on the loop thread; it is off here.)"""
    import threading

    from mwnotebook import Cluster

    monkeypatch.setenv("MWNOTEBOOK_REGISTRY", "0")

    cluster = Cluster(workers=2, cpu=True)
    run_with_events = cluster._run_with_events  # noqa: SLF001 -- the facade's event hand-over, no workers
    sinks = []

    async def emit_five(sink):
        sinks.append(sink)
        for i in range(5):
            if sink is not None:
                sink(i)
        return "done"

    assert run_with_events(emit_five, None, on_interrupt=lambda: None) == "done"
    assert sinks == [None]
    seen = []
    caller = threading.get_ident()
    result = run_with_events(emit_five, lambda e: seen.append((e, threading.get_ident())),
                             on_interrupt=lambda: None)
    assert result == "done"
    assert seen == [(i, caller) for i in range(5)]
