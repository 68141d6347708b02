"""``--max-restarts``: the restart policy and loop (mwnotebook/engine/cell/restarts.py) with the fake
workers of tests/_shared/fakes.py, the option's parsing, and the metrics store's restart marks.

Each fake "group" is a list of attempts; an attempt is the fake workers one run of the cell meets.
A restart moves to the next attempt's workers (or fails, like a host that is away).
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import re
from typing import Any

import numpy as np
import pytest

from mwnotebook.config.options import MAX_RESTARTS_ENV, add_restart_argument, max_restarts_from, restart_count
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.engine.cell import restarts as restarts_module
from mwnotebook.engine.cell.restarts import CellLimits, lost_worker, run_with_restarts
from mwnotebook.engine.cell.result import RunResult
from mwnotebook.engine.cell.run import CellRun, CellVerdict
from mwnotebook.errors import CannotRestartError, ClusterStartError, ConfigError, RestartFailedError, WorkerDiedError
from mwnotebook.frontend.text.relay import TextRelay
from mwnotebook.shared.events import RunRestarted
from mwnotebook.shared.metrics import MetricsStore
from tests._shared.fakes import LOST_PEER, OK_REPLY, FakeWorker, error_reply, stream

pytestmark = pytest.mark.usefixtures("fast_cell_policy")

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def metrics(worker: int, epoch: int, step: int) -> dict[str, Any]:
    records = [{"step": step, "epoch": epoch, "kind": "batch", "global_loss": 1.0 / step}]
    return {"msg_type": "display_data", "parent_header": {"msg_id": "x"},
            "content": {"data": {"application/vnd.mwnotebook.metrics+json": {"records": records}}}}


def killed(index: int, after: float = 0.02, **kw: Any) -> FakeWorker:
    return FakeWorker(index, dies_after=after, **kw)


def ok(index: int, text: str = "") -> FakeWorker:
    return FakeWorker(index, OK_REPLY, outputs=[stream(text)] if text else [])


class Group:
    """The fake cluster: which workers each attempt meets, and how restarts go."""

    def __init__(self, attempts: list[list[FakeWorker]], failing_starts: int = 0) -> None:
        self.attempts = attempts
        self.current = 0
        self.failing_starts = failing_starts
        self.starts = 0

    async def run_once(self, sink: Any) -> CellVerdict:
        abort = asyncio.Event()
        return await CellRun(self.attempts[self.current], "cell", None, abort, sink).run()

    async def restart(self) -> None:
        self.starts += 1
        if self.failing_starts:
            self.failing_starts -= 1
            raise ClusterStartError("host worker-host unreachable", worker=1, host="worker-host")
        self.current += 1


def drive(group: Group, max_restarts: int, **kw: Any) -> tuple[Any, list[Any]]:
    events: list[Any] = []
    outcome = asyncio.run(run_with_restarts(group.run_once, group.restart, events.append, max_restarts, **kw))
    return outcome, events


def test_lost_workers_are_restarted_until_the_cell_completes() -> None:
    group = Group([
        [ok(0, "a0\n"), killed(1, outputs=[stream("a1\n"), metrics(1, 2, 40)])],
        [killed(0, outputs=[stream("b0\n")]), FakeWorker(1, reply=None, outputs=[stream("b1\n")])],
        [ok(0, "c0\n"), ok(1, "c1\n")],
    ])
    outcome, events = drive(group, 3)
    assert outcome.verdict.ok and group.current == 2
    marks = [e for e in events if isinstance(e, RunRestarted)]
    assert [(m.restart, m.max_restarts, m.worker) for m in marks] == [(1, 3, 1), (2, 3, 0)]
    assert marks[0].cause == "worker 1 died (killed by SIGKILL)" and marks[0].epoch == 2 and marks[0].step == 40
    assert re.fullmatch(r"worker 1 died \(killed by SIGKILL\) at epoch 3; restart 1 of 3, \d+\.\d s",
                        marks[0].summary()), marks[0].summary()
    result = RunResult.of_attempts(outcome.results, outcome.restarts)
    assert result.stdout(0) == "a0\nb0\nc0\n" and result.stdout(1) == "a1\nb1\nc1\n"  # every attempt, in order
    assert result.stdout(1, attempt=2) == "b1\n" and result.attempts == 3 and result.restarts == marks
    assert [r["attempt"] for r in result.metrics] == [1]


@pytest.mark.parametrize("attempt", [
    [ok(0), FakeWorker(1, error_reply("ValueError", "bad batch"), delay=0.02)],  # the user's code raised
])
def test_an_error_in_the_code_is_never_restarted(attempt: list[FakeWorker]) -> None:
    group = Group([attempt, [ok(0), ok(1)]])
    outcome, events = drive(group, 5)
    assert not outcome.verdict.ok and group.starts == 0 and not outcome.restarts
    assert outcome.verdict.failures[0].ename == "ValueError"


def test_timeout_and_interrupt_are_never_restarted() -> None:
    async def once(timeout: float | None, abort_after: float | None) -> CellVerdict:
        abort = asyncio.Event()
        if abort_after is not None:
            asyncio.get_running_loop().call_later(abort_after, abort.set)
        return await CellRun([FakeWorker(0), FakeWorker(1)], "cell", timeout, abort, lambda e: None).run()

    assert lost_worker(asyncio.run(once(0.05, None))) is None
    assert lost_worker(asyncio.run(once(None, 0.05))) is None


def test_a_peer_that_became_unreachable_counts_as_lost() -> None:
    group = Group([[FakeWorker(0, LOST_PEER, delay=0.02), FakeWorker(1, reply=None, on_interrupt=None)],
                   [ok(0), ok(1)]])
    outcome, _ = drive(group, 1)
    assert outcome.verdict.ok and len(outcome.restarts) == 1


def test_a_cell_that_keeps_killing_its_worker_uses_up_its_restarts_and_lists_every_attempt() -> None:
    group = Group([[ok(0), killed(1)] for _ in range(4)])
    outcome, events = drive(group, 2)
    assert not outcome.verdict.ok and group.starts == 2 and len(outcome.restarts) == 2
    error = outcome.verdict.error(restarted=True).with_attempts(outcome.attempts)
    assert isinstance(error, WorkerDiedError)
    text = str(error)
    assert "The cell lost workers 3 times (2 restarts):" in text
    for n in (1, 2, 3):
        assert f"attempt {n}: worker 1 died (killed by SIGKILL)" in text, text
    shown = ANSI.sub("", "\n".join(error._render_traceback_()))
    assert shown.index("attempt 1:") < shown.index("attempt 2:") < shown.index("attempt 3:")
    again = pickle.loads(pickle.dumps(error))
    assert [a.attempt for a in again.attempts] == [1, 2] and str(again) == text


def test_zero_restarts_is_todays_behaviour() -> None:
    group = Group([[ok(0), killed(1)], [ok(0), ok(1)]])
    outcome, _ = drive(group, 0)
    assert not outcome.verdict.ok and group.starts == 0


def test_a_host_that_stays_away_ends_the_cell_with_that_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restarts_module, "FIRST_RETRY_PAUSE", 0.01)
    group = Group([[ok(0), killed(1)], [ok(0), ok(1)]], failing_starts=1000)
    outcome, events = drive(group, 5, host_wait=0.3)
    assert isinstance(outcome.start_error, RestartFailedError)
    assert "could not be started again within 0.3 s: host worker-host unreachable" in str(outcome.start_error)
    assert 2 <= group.starts < 100 and not outcome.restarts  # retried for a while, no restart used


def test_a_host_back_within_the_limit_is_one_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restarts_module, "FIRST_RETRY_PAUSE", 0.01)
    group = Group([[ok(0), killed(1)], [ok(0), ok(1)]], failing_starts=2)
    outcome, _ = drive(group, 1, host_wait=30)
    assert outcome.verdict.ok and group.starts == 3 and len(outcome.restarts) == 1


def test_a_start_that_cannot_help_ends_the_cell_at_once() -> None:
    class Given(Group):
        async def restart(self) -> None:
            self.starts += 1
            raise CannotRestartError("node b lost; no spare node in allocation 7; the job was given")

    group = Given([[ok(0), killed(1)], [ok(0), ok(1)]])
    outcome, _ = drive(group, 5, host_wait=30)  # no retries for 30 s: one start, then the reason
    assert group.starts == 1 and isinstance(outcome.start_error, RestartFailedError)
    assert "cannot be started again: node b lost; no spare node in allocation 7" in str(outcome.start_error)


def test_where_workers_came_back_is_said_under_the_restart_line() -> None:
    import io

    class Moving(Group):
        async def restart(self) -> list[str]:  # type: ignore[override]
            await super().restart()
            return ["node b lost; worker 1 restarted on node c"]

    outcome, events = drive(Moving([[ok(0), killed(1)], [ok(0), ok(1)]]), 2)
    assert outcome.verdict.ok and outcome.restarts[0].moved == ("node b lost; worker 1 restarted on node c",)
    out = io.StringIO()
    TextRelay(out, io.StringIO(), live=False, num_workers=2)(outcome.restarts[0])
    assert out.getvalue().splitlines()[1] == "[mwnotebook] node b lost; worker 1 restarted on node c"


def test_no_restart_after_the_user_interrupted() -> None:
    group = Group([[ok(0), killed(1)], [ok(0), ok(1)]])
    outcome, _ = drive(group, 3, aborted=lambda: True)
    assert not outcome.verdict.ok and group.starts == 0


@pytest.mark.parametrize("text", ["-1", "x", "1.5", ""])
def test_max_restarts_must_be_a_whole_number(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--max-restarts must be"):
        restart_count(text)
    parser = argparse.ArgumentParser()
    add_restart_argument(parser)
    assert parser.parse_args(["--max-restarts", "0"]).max_restarts == 0
    with pytest.raises(ConfigError, match=MAX_RESTARTS_ENV):
        max_restarts_from(None, {MAX_RESTARTS_ENV: text or "two"})
    assert max_restarts_from(None, {MAX_RESTARTS_ENV: "4"}) == 4 and max_restarts_from(2, {MAX_RESTARTS_ENV: "4"}) == 2
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ConfigError, match="--max-restarts must be a whole number >= 0"):
            ClusterSpec(max_restarts=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="max_restarts must be a whole number >= 0"):
            CellLimits.of(None, bad, 0)  # type: ignore[arg-type]


def test_the_metrics_store_keeps_one_run_with_a_mark_per_restart() -> None:
    store = MetricsStore()
    store.add(0, [{"step": s, "global_loss": 10 - s, "loss": 10 - s} for s in range(1, 8)])  # epochs 0..1 + 3 steps
    mark = store.add_restart("worker 1 died (SIGKILL)", time=5.0, restart_seconds=1.5)
    assert mark.attempt == 2 and mark.lost_step == 7 and mark.step == 7
    store.add(0, [{"step": s, "global_loss": 20 - s, "loss": 20 - s} for s in range(5, 10)])  # resumed at epoch 2
    xs, ys = store.global_series("loss")
    assert list(xs) == list(range(1, 10)) and np.all(np.diff(xs) > 0)  # nothing twice, no gap
    assert list(ys[-5:]) == [15, 14, 13, 12, 11]
    assert mark.resumed_step == 5 and mark.step == 5 and mark.replaced_points == 3 * 2  # local + global
    assert [r["attempt"] for r in store.records] == [1] * 7 + [2] * 5 and len(store.restart_marks()) == 1
    assert "attempt" not in store.metric_names()


def test_text_output_marks_the_restart_between_the_attempts_lines() -> None:
    import io

    out, err = io.StringIO(), io.StringIO()
    relay = TextRelay(out, err, live=False, num_workers=2)
    from mwnotebook.shared.events import WorkerOutput

    relay(WorkerOutput(1, "stream", {"name": "stdout", "text": "Epoch 3/8 half a line"}))
    relay(RunRestarted(1, 3, "worker 1 died (SIGKILL)", worker=1, epoch=2, restart_seconds=0.4))
    relay(WorkerOutput(1, "stream", {"name": "stdout", "text": "Epoch 3/8 again\n"}))
    assert out.getvalue().splitlines() == [
        "[worker 1] Epoch 3/8 half a line",
        "[mwnotebook] worker 1 died (SIGKILL) at epoch 3; restart 1 of 3, 0.4 s",
        "[worker 1] Epoch 3/8 again"]


def test_a_killed_source_worker_leaves_no_hole_in_the_global_curve() -> None:
    store = MetricsStore()
    store.add(0, [{"step": s, "global_loss": 1.0 / s} for s in range(1, 5)])  # worker 0: the global source
    store.add(1, [{"step": s, "global_loss": 1.0 / s} for s in range(1, 9)])  # worker 1 is ahead
    # worker 0 is killed with steps 5-8 still in its buffer; the resumed run starts at step 9
    store.add_restart("worker 0 died (SIGKILL)")
    store.add(1, [{"step": s, "global_loss": 1.0 / s} for s in range(9, 11)])
    store.add(0, [{"step": s, "global_loss": 1.0 / s} for s in range(9, 11)])
    assert list(store.global_series("loss")[0]) == [float(s) for s in range(1, 11)]


@pytest.mark.parametrize("value", ["-1", "two", "0.5"])
def test_the_magic_and_the_command_refuse_a_bad_count_before_anything_starts(value: str) -> None:
    from IPython.core.error import UsageError

    from mwnotebook.frontend.cli.command import build_parser
    from mwnotebook.frontend.notebook.magics import _parse, _spec, mwtrain_parser

    with pytest.raises(UsageError, match="--max-restarts must be"):
        _parse(mwtrain_parser(), f"--workers 2 --max-restarts {value}")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--max-restarts", value, "train.py"])
    ns = _parse(mwtrain_parser(), "--workers 2")
    assert _spec(ns).max_restarts == 0
    import os

    os.environ[MAX_RESTARTS_ENV] = value
    try:
        with pytest.raises(UsageError, match=MAX_RESTARTS_ENV):
            _spec(ns)
        os.environ[MAX_RESTARTS_ENV] = "3"
        assert _spec(ns).max_restarts == 3
        assert _spec(_parse(mwtrain_parser(), "--workers 2 --max-restarts 1")).max_restarts == 1
    finally:
        del os.environ[MAX_RESTARTS_ENV]
