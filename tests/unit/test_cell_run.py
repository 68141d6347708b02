"""The fault policy of one cell (:class:`CellRun`) with fake workers, nbclient-style.

Each fake worker plays a script of IOPub messages and an ``execute_reply`` content, and reacts to
an interrupt the way a kernel does (a ``KeyboardInterrupt`` reply, TensorFlow's error for a lost
peer, or nothing at all when frozen). The real-kernel tests (tests/integration,
tests/reliability) cover the same policy against real processes.
"""

from __future__ import annotations

import asyncio
import pickle
import re
from typing import Any

import pytest

from mwnotebook.engine.cell.run import CellRun, CellVerdict
from mwnotebook.errors import (
    ClusterInterrupted,
    ClusterStartError,
    ClusterTimeoutError,
    WorkerDiedError,
    WorkerError,
    WorkerFailure,
    render_failures,
)
from mwnotebook.shared.events import WorkerOutput, WorkerStateChanged
from tests._shared.fakes import LOST_PEER, OK_REPLY, FakeWorker, error_reply, stream

pytestmark = pytest.mark.usefixtures("fast_cell_policy")


def run_cell(*workers: FakeWorker, timeout: float | None = None, abort_after: float | None = None,
             names: dict[int, str] | None = None) -> tuple[CellVerdict, list[Any]]:
    events: list[Any] = []

    async def main() -> CellVerdict:
        abort = asyncio.Event()
        if abort_after is not None:
            asyncio.get_running_loop().call_later(abort_after, abort.set)
        return await CellRun(list(workers), "cell", timeout, abort, events.append, names=names).run()

    return asyncio.run(main()), events


def render_failures_plain(lines: list[str]) -> list[str]:
    """Rendered lines without their colour codes."""
    return [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in lines]


def plain(lines: list[str]) -> str:
    return "\n".join(render_failures_plain(lines))


def test_all_workers_succeed() -> None:
    verdict, events = run_cell(FakeWorker(0, OK_REPLY, outputs=[stream("a\n")]), FakeWorker(1, OK_REPLY))
    assert verdict.ok and verdict.failures == [] and not verdict.workers_spoiled
    assert verdict.result.stdout(0) == "a\n"
    assert not verdict.needs_release()
    states = [(e.worker, e.state) for e in events if isinstance(e, WorkerStateChanged)]
    assert sorted(states) == [(0, "done"), (0, "running"), (1, "done"), (1, "running")]
    assert any(isinstance(e, WorkerOutput) for e in events)


def test_raise_on_one_worker_interrupts_the_others() -> None:
    w0 = FakeWorker(0)  # runs until interrupted
    verdict, _ = run_cell(w0, FakeWorker(1, error_reply("ValueError", "bad batch"), delay=0.02))
    assert verdict.trigger == "failure" and verdict.workers_spoiled
    assert [(f.worker, f.kind) for f in verdict.failures] == [(1, "error"), (0, "interrupted")]
    assert w0.handle.interrupts == 1
    err = verdict.error(restarted=True)
    assert isinstance(err, WorkerError) and err.restarted and err.worker == 1
    text = plain(err._render_traceback_())
    assert text.splitlines()[0] == "[worker 1] worker 1 raised ValueError: bad batch"
    assert "[worker 0] worker 0 was interrupted" in text
    assert "step_39" not in text  # the interrupted worker's KeyboardInterrupt traceback is not shown


def test_a_failure_is_made_with_the_name_its_kernel_was_given() -> None:
    """The evaluator's (or a coordinator's) failure says so from the start: the names are handed to
    the run, nothing renames a failure afterwards."""
    verdict, _ = run_cell(FakeWorker(0), FakeWorker(1, error_reply("ValueError", "bad eval"), delay=0.02),
                          names={1: "evaluator"})
    assert [(f.worker, f.name) for f in verdict.failures] == [(1, "evaluator"), (0, "")]
    text = plain(verdict.error(restarted=False)._render_traceback_())
    assert text.splitlines()[0] == "[evaluator] evaluator raised ValueError: bad eval"
    assert "[worker 0] worker 0 was interrupted" in text


def test_a_dead_worker_is_the_cause_and_its_peer_a_one_line_consequence() -> None:
    w0 = FakeWorker(0, on_interrupt=LOST_PEER)
    verdict, events = run_cell(w0, FakeWorker(1, dies_after=0.02))
    assert verdict.trigger == "died" and verdict.workers_spoiled
    first, second = verdict.failures
    assert (first.worker, first.kind, first.exit_description) == (1, "died", "killed by SIGKILL")
    assert (second.worker, second.kind, second.peer) == (0, "consequence", 1)
    err = verdict.error(restarted=False)
    assert isinstance(err, WorkerDiedError)
    lines = render_failures_plain(err._render_traceback_())
    assert lines[:2] == ["[worker 1] worker 1 died (killed by SIGKILL)",
                         "[worker 0] worker 0 stopped: its collective lost worker 1 (UnavailableError)"]
    assert not any("frame_" in line for line in lines)  # no frames of the consequence
    assert (1, "failed", "killed by SIGKILL") in [(e.worker, e.state, e.error) for e in events
                                                  if isinstance(e, WorkerStateChanged)]


def test_a_peer_blocked_in_a_collective_is_not_called_frozen() -> None:
    verdict, _ = run_cell(FakeWorker(0, on_interrupt=None), FakeWorker(1, dies_after=0.02))
    assert [(f.worker, f.kind) for f in verdict.failures] == [(1, "died"), (0, "consequence")]
    text = str(verdict.error(restarted=True))
    assert "frozen" not in text and "worker 0 stopped: it was waiting in a collective for worker 1" in text


def test_a_frozen_worker_alone_is_reported_as_unresponsive() -> None:
    verdict, _ = run_cell(FakeWorker(0, on_interrupt=None), FakeWorker(1, error_reply("ValueError", "x"), delay=0.01))
    kinds = [(f.worker, f.kind) for f in verdict.failures]
    # worker 0's process state cannot be seen (a fake): it ignored the interrupt while worker 1 raised,
    # so it was waiting for worker 1 -- a consequence, listed after the cause.
    assert kinds == [(1, "error"), (0, "consequence")]


def test_timeout_interrupts_the_late_worker() -> None:
    verdict, _ = run_cell(FakeWorker(0, OK_REPLY), FakeWorker(1), timeout=0.1)
    assert verdict.trigger == "timeout" and verdict.workers_spoiled
    assert [(f.worker, f.kind) for f in verdict.failures] == [(1, "timeout")]
    assert isinstance(verdict.error(restarted=True), ClusterTimeoutError)


def test_user_interrupt_stops_everyone() -> None:
    verdict, _ = run_cell(FakeWorker(0), FakeWorker(1), abort_after=0.05)
    assert verdict.trigger == "interrupted"
    assert {f.kind for f in verdict.failures} == {"interrupted"}
    assert isinstance(verdict.error(restarted=True), ClusterInterrupted)


def test_the_same_error_everywhere_keeps_the_workers_and_is_shown_once() -> None:
    reply = error_reply("NameError", "name 'x' is not defined")
    verdict, _ = run_cell(FakeWorker(0, reply), FakeWorker(1, reply), FakeWorker(2, reply))
    assert verdict.trigger == "failure"
    assert not verdict.workers_spoiled  # every worker finished on its own: variables are kept
    assert verdict.needs_release()
    lines = render_failures_plain(verdict.error(restarted=False)._render_traceback_())
    assert lines[0] == "[workers 0, 1, 2] workers 0, 1, 2 raised NameError: name 'x' is not defined"
    assert sum("frame_0" in line for line in lines) == 1


def test_the_same_error_after_the_settle_window_keeps_the_workers() -> None:
    """A loaded machine can delay one worker's reply past SETTLE_SECONDS: that worker is interrupted,
    but its cell ends with the very error the other raised on its own, so it raised it too."""
    reply = error_reply("NameError", "name 'x' is not defined")
    late = FakeWorker(1, reply, delay=0.1)  # after the 0.05 s settle window, within the 0.2 s grace
    verdict, _ = run_cell(FakeWorker(0, reply), late)
    assert late.handle.interrupts == 1
    assert [(f.worker, f.kind) for f in verdict.failures] == [(0, "error"), (1, "error")]
    assert not verdict.workers_spoiled
    lines = render_failures_plain(verdict.error(restarted=False)._render_traceback_())
    assert lines[0] == "[workers 0, 1] workers 0, 1 raised NameError: name 'x' is not defined"


def test_another_ending_after_the_interrupt_stays_an_interruption() -> None:
    late = FakeWorker(1, error_reply("ValueError", "raised while interrupted"), delay=0.1)
    verdict, _ = run_cell(FakeWorker(0, error_reply("NameError", "name 'x' is not defined")), late)
    assert [(f.worker, f.kind) for f in verdict.failures] == [(0, "error"), (1, "interrupted")]
    assert verdict.workers_spoiled


def test_different_errors_are_all_shown_cause_first() -> None:
    verdict, _ = run_cell(FakeWorker(0, error_reply("KeyError", "'label'"), delay=0.04),
                          FakeWorker(1, error_reply("ValueError", "bad shape"), delay=0.01))
    assert [f.worker for f in verdict.failures] == [1, 0]  # the error the notebook saw first
    lines = render_failures_plain(verdict.error(restarted=False)._render_traceback_())
    heads = [line for line in lines if line.startswith("[worker")]
    assert heads == ["[worker 1] worker 1 raised ValueError: bad shape", "[worker 0] worker 0 raised KeyError: 'label'"]
    assert sum("frame_0" in line for line in lines) == 2  # both tracebacks are there


def test_consequential_errors_follow_the_cause() -> None:
    verdict, _ = run_cell(FakeWorker(0, LOST_PEER, delay=0.01), FakeWorker(1, error_reply("ValueError", "boom"),
                                                                               delay=0.02))
    assert [(f.worker, f.kind, f.peer) for f in verdict.failures] == [(1, "error", None), (0, "consequence", 1)]
    terminal = render_failures(verdict.failures, terminal=True, color=False)
    assert terminal[0] == "mwnotebook: worker 1 raised ValueError: boom"
    assert terminal[-1] == "mwnotebook: worker 0 stopped: its collective lost worker 1 (UnavailableError)"
    assert all(line.startswith(("mwnotebook: ", "[worker 1] ")) for line in terminal)


def test_consequential_errors_alone_stay_errors() -> None:
    verdict, _ = run_cell(FakeWorker(0, LOST_PEER), FakeWorker(1, LOST_PEER))
    assert {f.kind for f in verdict.failures} == {"error"}


def test_a_lost_channel_counts_as_a_dead_worker() -> None:
    verdict, _ = run_cell(FakeWorker(0, OK_REPLY), FakeWorker(1, lose=True, delay=0.01))
    assert [(f.worker, f.kind) for f in verdict.failures] == [(1, "died")]
    assert "connection lost: ConnectionResetError" in verdict.failures[0].exit_description
    assert isinstance(verdict.error(restarted=True), WorkerDiedError)


def test_a_diagnosed_error_asks_for_fresh_workers() -> None:
    reply = error_reply("RuntimeError", "Collective ops must be configured at program startup")
    verdict, _ = run_cell(FakeWorker(0, reply), FakeWorker(1, reply))
    assert verdict.workers_spoiled and "strategy first" in verdict.failures[0].hint


def test_run_errors_survive_pickling() -> None:
    verdict, _ = run_cell(FakeWorker(0, LOST_PEER, delay=0.01), FakeWorker(1, dies_after=0.0))
    for restarted in (True, False):
        err = verdict.error(restarted=restarted)
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and back.restarted is restarted
        assert back.failures == err.failures and str(back) == str(err) and back.worker == err.worker


@pytest.mark.parametrize("cls", [WorkerError, WorkerDiedError, ClusterTimeoutError, ClusterInterrupted])
def test_every_run_error_class_pickles(cls: type) -> None:
    failures = [WorkerFailure(1, "error", "ValueError", "x", ["tb"], seen_at=0.5),
                WorkerFailure(0, "consequence", "UnavailableError", peer=1)]
    err = cls(failures, restarted=True, detail="while running")
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), back.failures, back.restarted, back.detail, str(back)) == \
        (cls, err.failures, True, "while running", str(err))


def test_start_errors_pickle_with_their_worker_and_host() -> None:
    back = pickle.loads(pickle.dumps(ClusterStartError("no python", worker=1, host="gpu1")))
    assert (str(back), back.worker, back.host) == ("no python", 1, "gpu1")
