"""A failed cell's error owns the workers' stacks from its constructor on (mwnotebook/errors.py
``ClusterRunError.stacks``), shows them, and keeps them through pickle."""

from __future__ import annotations

import pickle

from mwnotebook.engine.cell.result import RunResult
from mwnotebook.engine.cell.run import CellVerdict
from mwnotebook.engine.cell.stacks import StacksReport, ThreadStack, WorkerStacks
from mwnotebook.errors import ClusterTimeoutError, WorkerFailure


def _report() -> StacksReport:
    main = ThreadStack(0x7F, True, ['File "/x/tensorflow/collective_ops.py", line 3 in all_reduce'])
    return StacksReport([WorkerStacks(0, "localhost", 11, [main]), WorkerStacks(1, "localhost", 12, note="gone")])


def test_the_error_is_built_with_its_stacks() -> None:
    verdict = CellVerdict(RunResult(2), trigger="timeout", failures=[WorkerFailure(0, "timeout")],
                          stacks=_report())
    err = verdict.error(restarted=True)
    assert isinstance(err, ClusterTimeoutError) and err.stacks is verdict.stacks
    text = _report().text()
    assert str(err).endswith(f"\n\nWorker stacks at that moment:\n{text}")
    rendered = err._render_traceback_()
    assert rendered[-len(text.splitlines()) - 1:] == ["Worker stacks at that moment:", *text.splitlines()]


def test_stacks_survive_pickle() -> None:
    err = ClusterTimeoutError([WorkerFailure(0, "timeout")], restarted=False, detail="d", stacks=_report())
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ClusterTimeoutError and back.stacks == err.stacks
    assert str(back) == str(err) and back._render_traceback_() == err._render_traceback_()


def test_an_error_without_stacks_says_nothing_of_them() -> None:
    err = ClusterTimeoutError([WorkerFailure(0, "timeout")], restarted=False)
    assert err.stacks is None and "Worker stacks" not in str(err)
    assert pickle.loads(pickle.dumps(err)).stacks is None
