"""Which failed cells get a fresh coordinator kernel and one more run (engine/cell/fresh_coordinator.py)."""

from __future__ import annotations

from mwnotebook.engine.cell.fresh_coordinator import SECOND_STRATEGY, needs_fresh_coordinator, rerun_line
from mwnotebook.engine.cell.result import RunResult
from mwnotebook.engine.cell.run import CellVerdict, Trigger
from mwnotebook.errors import WorkerFailure
from mwnotebook.processes.runtime.ps_guard import SecondParameterServerStrategy


def verdict(trigger: Trigger | None, *failures: WorkerFailure) -> CellVerdict:
    return CellVerdict(RunResult(1), trigger=trigger, failures=list(failures))


def test_a_second_strategy_in_the_coordinator_gets_a_fresh_one() -> None:
    assert SECOND_STRATEGY == SecondParameterServerStrategy.__name__
    assert needs_fresh_coordinator(verdict("failure", WorkerFailure(0, "error", ename=SECOND_STRATEGY)))


def test_any_other_end_does_not() -> None:
    assert not needs_fresh_coordinator(verdict(None))
    assert not needs_fresh_coordinator(verdict("failure", WorkerFailure(0, "error", ename="ValueError")))
    assert not needs_fresh_coordinator(verdict("died", WorkerFailure(0, "died")))
    # the user's interrupt or deadline came first: no rerun behind their back
    assert not needs_fresh_coordinator(verdict("interrupted", WorkerFailure(0, "error", ename=SECOND_STRATEGY)))
    assert not needs_fresh_coordinator(verdict("timeout", WorkerFailure(0, "error", ename=SECOND_STRATEGY)))
    # the strategy refused only as a consequence of another cause
    assert not needs_fresh_coordinator(verdict("failure", WorkerFailure(1, "died"),
                                               WorkerFailure(0, "error", ename=SECOND_STRATEGY)))


def test_the_line_is_one_line_saying_what_happened_to_the_servers() -> None:
    kept, renewed = rerun_line(servers_kept=True), rerun_line(servers_kept=False)
    assert kept.count("\n") == renewed.count("\n") == 1 and kept.endswith("\n")
    assert "servers kept running" in kept and "started afresh" in renewed
