"""The one rule for which worker state a run's observers show (mwnotebook/shared/run_states.py),
and its two readers agreeing: the status table and the ``mwnotebook`` command's report."""

from __future__ import annotations

import io

from mwnotebook.frontend.chart.status import StatusBoard
from mwnotebook.frontend.cli.run_observer import RunObserver
from mwnotebook.shared.events import WorkerMetrics, WorkerStateChanged
from mwnotebook.shared.run_states import RunStates

# a start, a cell where worker 1 fails and worker 0 finishes, then the group restart after it
FAILED_RUN = [WorkerStateChanged(0, "starting"), WorkerStateChanged(1, "starting"),
              WorkerStateChanged(0, "idle"), WorkerStateChanged(1, "idle"),
              WorkerStateChanged(0, "running"), WorkerStateChanged(1, "running"),
              WorkerStateChanged(1, "failed", "ValueError"), WorkerStateChanged(0, "done"),
              WorkerStateChanged(0, "starting"), WorkerStateChanged(1, "starting"),
              WorkerStateChanged(0, "idle"), WorkerStateChanged(1, "stopped")]


def test_a_restart_after_the_run_does_not_replace_how_it_ended() -> None:
    states = RunStates(2)
    applied = [states.apply(e) for e in FAILED_RUN]
    assert applied == [True] * 8 + [False] * 4
    assert states.states == ["done", "failed"] and states.errors == ["", "ValueError"]
    assert states.apply(WorkerStateChanged(1, "running")) and states.state(1) == "running"
    assert states.error(1) == ""  # the next cell starts clean


def test_before_a_run_the_lifecycle_is_shown() -> None:
    states = RunStates(1)
    assert states.apply(WorkerStateChanged(0, "idle")) and states.apply(WorkerStateChanged(0, "stopped"))
    assert states.states == ["stopped"]


def test_progress_means_running_and_the_verdict_has_the_last_word() -> None:
    states = RunStates(1)
    states.progressed(0)
    assert states.state(0) == "running"
    assert not states.apply(WorkerStateChanged(0, "idle"))
    states.record(0, "unresponsive", "worker 0 did not respond to an interrupt")
    assert (states.state(0), states.error(0)) == ("unresponsive", "worker 0 did not respond to an interrupt")


def test_more_workers_than_announced_are_tracked() -> None:
    states = RunStates(1)
    assert states.apply(WorkerStateChanged(3, "running")) and states.states == ["starting"] * 3 + ["running"]


def test_the_status_table_and_the_report_follow_the_same_rule() -> None:
    board = StatusBoard(2, "loss")
    observer = RunObserver(2, io.StringIO(), io.StringIO())
    for event in [*FAILED_RUN[:5], WorkerMetrics(1, ({"step": 1, "loss": 0.5},)), *FAILED_RUN[5:]]:
        if isinstance(event, WorkerStateChanged):
            board.on_state(event)
        else:
            board.on_metrics(event)
        observer(event)
    assert [row["state"] for row in board.rows()] == observer.states == ["done", "failed"]
    assert [row["error"] for row in board.rows()] == observer.errors == ["", "ValueError"]
