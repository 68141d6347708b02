"""Per-worker-server curves of a --ps coordinator's custom loop, pure logic: RemoteValues in the
reporter (worker/_remote.py, worker/_report.py) and the chart's lines (frontend/chart/lines.py).
The RemoteValue here is a fake with the completion event TF 2.21's RemoteValueImpl has; the real
one is tested in tests/tf/test_ps_roles.py."""

from __future__ import annotations

import enum
import json
import logging
import threading
import time

import pytest

from mwnotebook.config.roles import RoleLayout
from mwnotebook.dashboard import Dashboard
from mwnotebook.frontend.chart.lines import ChartLines, chart_lines
from mwnotebook.shared.events import WorkerMetrics
from mwnotebook.worker import _report
from mwnotebook.worker._report import Reporter


class _Status(enum.Enum):
    NOT_READY = 0
    READY = 1
    ABORTED = 2


class RemoteValue:  # the base class's name is what _remote.is_remote looks for
    pass


class FakeRemote(RemoteValue):
    def __init__(self, value=None):
        self._status_available_event = threading.Event()
        self._status = _Status.NOT_READY
        self._error = None
        self._value = value
        self.fetched_in: list[str] = []

    def finish(self, value=None):
        if value is not None:
            self._value = value
        self._status = _Status.READY
        self._status_available_event.set()
        return self

    def abort(self):
        self._status = _Status.ABORTED
        self._error = RuntimeError("aborted")
        self._status_available_event.set()

    def fetch(self):
        assert self._status_available_event.is_set(), "fetched before the closure ran: that would wait"
        self.fetched_in.append(threading.current_thread().name)
        if self._error is not None:
            raise self._error
        return self._value


def _reporter(interval=1000.0):
    sent: list[dict] = []

    def publish(records):
        sent.extend(records)
        return True

    return Reporter(publish=publish, interval=interval), sent


def test_records_whose_values_are_not_ready_stay_buffered_and_go_out_in_order_once_ready():
    rep, sent = _reporter()
    a, b, c = FakeRemote(1.0), FakeRemote(2.0), FakeRemote(3.0)
    rep.report(step=0, loss=a)
    rep.report(step=1, loss=b)
    rep.report(step=2, loss=c)
    a.finish()
    c.finish()
    rep.flush()
    assert [(r["step"], r["loss"]) for r in sent] == [(0, 1.0), (2, 3.0)]
    b.finish()
    rep.flush()
    assert [(r["step"], r["loss"]) for r in sent] == [(0, 1.0), (2, 3.0), (1, 2.0)]
    rep.flush()
    assert len(sent) == 3  # nothing twice


def test_a_scheduled_dict_becomes_metrics_and_its_worker_names_the_server():
    rep, sent = _reporter()
    rep.report(step=5, scheduled=FakeRemote({"loss": 0.5, "worker": 1}).finish())
    rep.flush()
    assert [(r["step"], r["loss"], r["server"]) for r in sent] == [(5, 0.5, 1)]
    assert "worker" not in sent[0] or sent[0]["worker"] != 1  # the kernel's index, never the server's


def test_the_training_loop_never_fetches_a_remote_value_the_timer_does():
    rep, sent = _reporter(interval=0.05)
    values = [FakeRemote({"loss": float(i), "worker": i % 2}).finish() for i in range(20)]
    for i, value in enumerate(values):
        rep.report(step=i, scheduled=value)
    deadline = time.monotonic() + 30  # generous hang bound on a loaded machine
    while len(sent) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r["step"] for r in sent] == list(range(20))
    here = threading.current_thread().name
    assert all(v.fetched_in and here not in v.fetched_in for v in values)


def test_an_aborted_step_is_dropped_with_one_log_line_and_the_others_go_on(caplog):
    rep, sent = _reporter()
    ok, lost, also = FakeRemote(1.0).finish(), FakeRemote(2.0), FakeRemote(3.0).finish()
    lost.abort()
    for i, value in enumerate((ok, lost, also)):
        rep.report(step=i, loss=value)
    with caplog.at_level(logging.WARNING, logger="mwnotebook.worker"):
        rep.flush()
    assert [r["step"] for r in sent] == [0, 2]
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1


def test_the_cell_end_waits_for_late_steps_but_not_for_ever(caplog):
    rep, sent = _reporter()
    late, never = FakeRemote(1.0), FakeRemote(2.0)
    rep.report(step=0, loss=late)
    threading.Timer(0.2, late.finish).start()
    rep.flush(wait=5.0)  # what the cell's end does, with REMOTE_WAIT
    assert [r["step"] for r in sent] == [0]
    rep.report(step=1, loss=never)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="mwnotebook.worker"):
        rep.flush(wait=0.3)
    assert time.monotonic() - started < 30  # a generous hang bound: the wait is 0.3 s
    assert [r["step"] for r in sent] == [0]
    assert any("did not finish" in r.getMessage() for r in caplog.records)
    never.finish()
    rep.flush()
    assert [r["step"] for r in sent] == [0]  # dropped, not kept for a later cell
    assert _report.REMOTE_WAIT >= 60  # the cell's end bound is generous


def test_worker_is_reserved_outside_a_ps_coordinator_and_names_the_server_inside(monkeypatch):
    rep, sent = _reporter()
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(TypeError, match="reserved"):
        rep.report(step=0, worker=1, loss=0.5)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]},
                                                "task": {"type": "chief", "index": 0}}))
    rep.report(step=0, worker=FakeRemote(1).finish(), loss=FakeRemote(0.5).finish())
    rep.flush()
    assert [(r["server"], r["loss"]) for r in sent] == [(1, 0.5)]
    with pytest.raises(TypeError, match="RemoteValue"):
        rep.report(step=1, scheduled={"loss": 1.0})


def test_chart_lines_put_servers_after_the_kernels():
    layout = RoleLayout(workers=2, ps=1, evaluator=True)
    lines = chart_lines(layout, layout.kernel_names())
    assert (lines.kernels, lines.servers, lines.count) == (2, 2, 4)
    assert lines.line_of(0, {"server": 0}) == 2 and lines.line_of(0, {"server": 1}) == 3
    assert lines.line_of(1, {"val_loss": 1.0}) == 1  # the evaluator keeps its own line
    assert lines.line_of(0, {"server": 7}) == 0  # not a server of this cluster: the kernel's line
    assert lines.series_name(3, "loss") == "worker 1 (local loss)"
    assert lines.series_name(0, "loss") == "coordinator (loss)"
    mwms = RoleLayout(workers=3, evaluator=True)  # MWMS: no server lines, the evaluator named as in the text
    assert chart_lines(mwms, mwms.kernel_names()) == ChartLines(4, 0, {3: "evaluator"})
    assert chart_lines(mwms, {}).series_name(3, "loss") == "worker 3 (local loss)"


def test_the_dashboard_draws_a_coordinators_server_records_as_the_servers_curves():
    board = Dashboard(1, use_widget=False, lines=ChartLines(1, 2, {0: "coordinator"}))
    records = tuple({"step": s, "loss": 1.0 / (s + 1), "server": s % 2} for s in range(6))
    board(WorkerMetrics(worker=0, records=records + ({"step": 6, "global_loss": 0.1},)))
    assert list(board.store.local_series(1, "loss")[0]) == [0, 2, 4]
    assert list(board.store.local_series(2, "loss")[0]) == [1, 3, 5]
    assert not len(board.store.local_series(0, "loss")[0])
    assert {r["worker"] for r in board.records} == {0}  # the records still name the kernel
    names = [trace.name for trace in board.static_figure().data if trace.name and "loss" in trace.name]
    assert names == ["coordinator (loss)", "worker 0 (local loss)", "worker 1 (local loss)",
                     "global loss (all workers)"]
    assert board.status_text().startswith("coordinator: ")  # not "worker 0", a worker server's name


def test_a_non_finite_note_names_the_worker_server_not_its_line_number():
    board = Dashboard(1, use_widget=False, lines=ChartLines(1, 2, {0: "coordinator"}))
    board(WorkerMetrics(worker=0, records=({"step": 7, "loss": float("nan"), "server": 1},)))
    note = board._feed.note  # noqa: SLF001 - what the widget's next update says (frontend/chart/feed.py)
    assert note.startswith("worker 1 reported loss = nan"), note  # not "worker 2", its line's number


def test_a_coordinators_fit_that_reports_epochs_only_draws_its_loss_in_the_saved_chart():
    """A ``--ps`` coordinator's ``fit`` sends epoch summaries only (no step records: steps run as
    closures on the worker servers). The saved chart draws them on an epoch plot; before, an empty
    ``loss`` step plot stood in for the missing step records and hid the epoch loss (an empty picture)."""
    board = Dashboard(1, use_widget=False, lines=ChartLines(1, 2, {0: "coordinator"}))
    epochs = [0.677, 0.641, 0.605]
    board(WorkerMetrics(0, tuple({"step": 20 * (e + 1), "time": 1000.0 + e, "kind": "epoch", "epoch": e,
                                  "global_loss": loss} for e, loss in enumerate(epochs))))
    board.finish()
    (drawn,) = [t for t in board.static_figure().data if t.name == "global loss (all workers)"]
    assert list(drawn.x) == [1, 2, 3] and list(drawn.y) == pytest.approx(epochs), drawn
    assert "<polyline" in board.svg()
