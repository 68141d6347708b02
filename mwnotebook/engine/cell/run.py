"""One cell on every worker of a cluster: the lockstep wait, stopping the rest after a fault, and
the verdict (which worker failed first, and whether the workers can be kept).

A :class:`CellRun` gets only what it needs -- the workers, the abort signal and an event sink --
and returns a :class:`CellVerdict`. It never restarts or raises for a failed cell: the cluster
decides that from the verdict.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from mwnotebook.engine.cell.diagnose import diagnose, is_consequential
from mwnotebook.engine.cell.iopub_events import events_from_iopub
from mwnotebook.engine.cell.result import RunResult
from mwnotebook.engine.cell.stacks import StacksReport, dump_stacks
from mwnotebook.engine.workers.bootstrap import SETTLE_EXPRESSION
from mwnotebook.engine.workers.worker import ExecutionOutcome, MessageCallback
from mwnotebook.errors import (
    ClusterInterrupted,
    ClusterRunError,
    ClusterTimeoutError,
    FailureKind,
    WorkerDiedError,
    WorkerError,
    WorkerFailure,
    order_failures,
)
from mwnotebook.launchers.base import KernelHandle
from mwnotebook.shared.events import EventSink, WorkerState, WorkerStateChanged

#: How often worker processes are checked for death while a cell runs.
LIVENESS_POLL_SECONDS = 0.2
#: How long interrupted workers get to stop before the group is restarted.
INTERRUPT_GRACE_SECONDS = 2.0
#: After one worker fails, how long the others may take to finish by themselves (the same error
#: everywhere arrives a few milliseconds apart) before they are interrupted. One that is later still
#: (a loaded machine) and then ends with that same error is not counted as interrupted
#: (``CellRun._keep_late_identical_errors``).
SETTLE_SECONDS = 0.5


class RunWorker(Protocol):
    """What a cell run needs of a worker (:class:`~mwnotebook.engine.workers.worker.Worker`, or a fake)."""

    handle: KernelHandle
    #: Where the worker's output of every cell is appended ('' for none).
    output_log: str

    @property
    def index(self) -> int: ...

    async def execute(self, code: str, on_output: MessageCallback, silent: bool = False,
                      user_expressions: dict[str, str] | None = None) -> ExecutionOutcome: ...


#: What ended the wait for a cell's workers (see :class:`CellVerdict`).
Trigger = Literal["failure", "died", "timeout", "interrupted"]


@dataclass
class CellVerdict:
    """How a cell ended on the cluster.

    ``trigger`` is ``None`` when every worker finished without error; otherwise what ended the
    wait: ``failure`` (a worker raised), ``died``, ``timeout`` or ``interrupted``.
    """

    result: RunResult
    trigger: Trigger | None = None
    failures: list[WorkerFailure] = field(default_factory=list)
    #: Some worker died, had to be interrupted, or is in a state TensorFlow cannot recover from:
    #: the workers cannot be kept as they are.
    workers_spoiled: bool = False
    #: Where each worker was (taken on timeout, and of workers that ignored their interrupt).
    stacks: StacksReport | None = None

    @property
    def ok(self) -> bool:
        return self.trigger is None

    def needs_release(self) -> bool:
        """Whether any worker holds replaced objects to free between cells (unknown counts as yes)."""
        return any(o is None or o.status != "ok" or o.expression("settle") == "True"
                   for o in self.result.outcomes)

    def error(self, restarted: bool) -> ClusterRunError:
        """The exception for a failed cell (``restarted``: the cluster is replacing the workers)."""
        if self.trigger == "interrupted":
            cls: type[ClusterRunError] = ClusterInterrupted
        elif self.trigger == "timeout":
            cls = ClusterTimeoutError
        elif any(f.kind == "died" for f in self.failures):
            cls = WorkerDiedError
        else:
            cls = WorkerError
        return cls(self.failures, restarted=restarted, stacks=self.stacks)


class CellRun:
    """One cell on every worker: the wait, the abort, and the verdict."""

    def __init__(self, workers: Sequence[RunWorker], code: str, timeout: float | None,
                 abort: asyncio.Event, emit: EventSink, names: Mapping[int, str] | None = None) -> None:
        self.workers = list(workers)
        #: Kernels that are not plain replicas (``coordinator``, ``evaluator``: config/roles.py
        #: ``kernel_names``): each failure is made with its kernel's name, never patched on later.
        self.names = dict(names or {})
        self.code = code
        self.timeout = timeout
        self.abort = abort
        self.emit = emit
        self.result = RunResult(len(self.workers), log_paths=[w.output_log for w in self.workers])
        self.started = 0.0
        self.seen_at: dict[int, float] = {}
        self.dead: dict[int, str] = {}
        self.interrupted: set[int] = set()
        self.unresponsive: set[int] = set()

    def _state(self, index: int, state: WorkerState, error: str = "") -> None:
        self.emit(WorkerStateChanged(worker=index, state=state, error=error))

    def _on_output(self, index: int) -> MessageCallback:
        def handle(msg: dict[str, Any]) -> None:
            for event in events_from_iopub(index, msg):
                self.result.add(event)
                self.emit(event)
        return handle

    def _seen(self, index: int) -> None:
        self.seen_at.setdefault(index, time.monotonic() - self.started)

    async def run(self) -> CellVerdict:
        self.started = time.monotonic()
        for w in self.workers:
            self._state(w.index, "running")
        tasks = {w.index: asyncio.ensure_future(w.execute(self.code, self._on_output(w.index),
                                                          user_expressions={"settle": SETTLE_EXPRESSION}))
                 for w in self.workers}
        deadline = None if self.timeout is None else self.started + self.timeout
        trigger = await self._wait(tasks, deadline)
        self.result.elapsed = time.monotonic() - self.started
        if trigger is None:
            return CellVerdict(self.result)
        # Where each worker is, taken before the interrupt changes it: on timeout, or (below) of the
        # workers that ignored their interrupt.
        stacks = await dump_stacks(self.workers, self.code) if trigger == "timeout" else None
        if trigger in ("failure", "died"):
            await self._settle(tasks)
        await self._stop_the_rest(tasks)
        if trigger == "failure":
            self._keep_late_identical_errors()
        if stacks is None and self.unresponsive:
            stacks = await dump_stacks([w for w in self.workers if w.index in self.unresponsive], self.code)
        self.result.elapsed = time.monotonic() - self.started
        failures = self._failures(trigger)
        spoiled = bool(self.interrupted or self.dead) or any(
            (d := diagnose(f.ename, f.evalue)) is not None and d.needs_restart for f in failures)
        return CellVerdict(self.result, trigger, failures, spoiled, stacks)

    def _collect(self, tasks: dict[int, asyncio.Task[ExecutionOutcome]],
                 indexes: Sequence[int] | None = None) -> bool:
        """Record finished outcomes (of ``indexes``, default all); True if any of them failed."""
        failed = False
        for index in tasks if indexes is None else indexes:
            task = tasks[index]
            if not task.done() or self.result.outcomes[index] is not None:
                continue
            try:
                outcome = task.result()
            except asyncio.CancelledError:
                continue
            except Exception as exc:  # a lost channel counts as a dead worker
                if index not in self.dead:
                    self.dead[index] = f"connection lost: {type(exc).__name__}"
                    self._seen(index)
                failed = True
                continue
            self.result.outcomes[index] = outcome
            if outcome.status == "ok":
                self._state(index, "done")
            else:
                failed = True
                self._seen(index)
                self._state(index, "failed", outcome.ename)
        return failed

    async def _find_dead(self) -> bool:
        for w in self.workers:
            if w.index not in self.dead and not await w.handle.is_alive():
                self.dead[w.index] = w.handle.exit_description() or "exited"
                self._seen(w.index)
                self._state(w.index, "failed", self.dead[w.index])
        return bool(self.dead)

    async def _wait(self, tasks: dict[int, asyncio.Task[ExecutionOutcome]],
                    deadline: float | None) -> Trigger | None:
        """Until every worker is done, or a fault: each finished task is looked at once, and the
        processes' liveness every LIVENESS_POLL_SECONDS (not at every finished task: that was
        N x N checks per cell)."""
        loop = asyncio.get_running_loop()
        finished: list[int] = []
        wakeup: list[asyncio.Future[None]] = [loop.create_future()]

        def on_done(index: int) -> None:
            finished.append(index)
            if not wakeup[0].done():
                wakeup[0].set_result(None)

        def watcher(index: int) -> Callable[[asyncio.Task[ExecutionOutcome]], None]:
            return lambda _task: on_done(index)

        for index, task in tasks.items():
            task.add_done_callback(watcher(index))
        abort_wait: asyncio.Future[Any] = asyncio.ensure_future(self.abort.wait())
        remaining = len(tasks)
        checked_at = time.monotonic()
        try:
            while True:
                wakeup[0] = loop.create_future()
                batch, finished[:] = list(finished), []
                remaining -= len(batch)
                if self._collect(tasks, batch):
                    return "failure"
                if remaining <= 0:
                    return None
                now = time.monotonic()
                if now - checked_at >= LIVENESS_POLL_SECONDS:
                    checked_at = now
                    if await self._find_dead():
                        return "died"
                if self.abort.is_set():
                    return "interrupted"
                wait = LIVENESS_POLL_SECONDS - (now - checked_at)
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        return "timeout"
                    wait = min(wait, left)
                if not finished:
                    await asyncio.wait([wakeup[0], abort_wait], timeout=max(wait, 0.0),
                                       return_when=asyncio.FIRST_COMPLETED)
        finally:
            abort_wait.cancel()

    async def _settle(self, tasks: dict[int, asyncio.Task[ExecutionOutcome]]) -> None:
        pending = [t for t in tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=SETTLE_SECONDS)
        self._collect(tasks)

    async def _stop_the_rest(self, tasks: dict[int, asyncio.Task[ExecutionOutcome]]) -> None:
        running = [w for w in self.workers if not tasks[w.index].done() and w.index not in self.dead]
        self.interrupted = {w.index for w in running}
        await asyncio.gather(*(w.handle.interrupt() for w in running), return_exceptions=True)
        grace_end = time.monotonic() + INTERRUPT_GRACE_SECONDS
        while time.monotonic() < grace_end:
            pending = [tasks[w.index] for w in running if not tasks[w.index].done()]
            if not pending:
                break
            await asyncio.wait(pending, timeout=min(LIVENESS_POLL_SECONDS, grace_end - time.monotonic()))
            if await self._find_dead():
                break
        self._collect(tasks)
        await self._find_dead()
        self.unresponsive = {i for i in self.interrupted if not tasks[i].done() and i not in self.dead}
        for i in self.interrupted:
            self._seen(i)
        for task in tasks.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)

    def _keep_late_identical_errors(self) -> None:
        """Interrupted workers whose cell ended with the very error that a worker raised on its own
        were not stopped by the interrupt: the same error everywhere, only later (a loaded machine
        can delay a reply past SETTLE_SECONDS, and a kernel not yet running the cell ignores the
        interrupt). They count as raising it, and do not spoil the workers. Any other ending of an
        interrupted worker (KeyboardInterrupt, another error) stays an interruption."""
        raised = {(o.ename, o.evalue) for i, o in enumerate(self.result.outcomes)
                  if o is not None and o.status != "ok" and i not in self.interrupted
                  and o.ename != "KeyboardInterrupt" and not is_consequential(o.ename)}
        self.interrupted = {i for i in self.interrupted
                            if (o := self.result.outcomes[i]) is None or (o.ename, o.evalue) not in raised}

    def _failures(self, trigger: Trigger) -> list[WorkerFailure]:
        """Each worker's fault, the cause first (see :func:`mwnotebook.errors.order_failures`)."""
        failures: list[WorkerFailure] = []
        frozen: dict[int, str] = {}
        for w in self.workers:
            i = w.index
            outcome = self.result.outcomes[i]
            at = self.seen_at.get(i, self.result.elapsed)
            name = self.names.get(i, "")
            if i in self.dead:
                failures.append(WorkerFailure(i, "died", exit_description=self.dead[i], seen_at=at, name=name))
            elif i in self.unresponsive and trigger in ("failure", "died"):
                frozen[i] = _process_state(w)
                failures.append(WorkerFailure(i, "unresponsive", seen_at=at, name=name,
                                              exit_description=w.handle.exit_description() or frozen[i]))
            elif i in self.interrupted and not _lost_a_peer(outcome):
                kind: FailureKind = "timeout" if trigger == "timeout" else "interrupted"
                failures.append(WorkerFailure(i, kind, ename=outcome.ename if outcome else "",
                                              evalue=outcome.evalue if outcome else "",
                                              traceback=outcome.traceback if outcome else [], seen_at=at,
                                              name=name))
            elif outcome is not None and outcome.status != "ok":
                d = diagnose(outcome.ename, outcome.evalue)
                failures.append(WorkerFailure(i, "error", ename=outcome.ename, evalue=outcome.evalue,
                                              traceback=outcome.traceback, hint=d.hint if d else "", seen_at=at,
                                              name=name))
        return order_failures(_mark_consequences(failures, frozen))


def _lost_a_peer(outcome: ExecutionOutcome | None) -> bool:
    """An interrupted worker whose cell in fact ended with TensorFlow's error for a lost peer."""
    return outcome is not None and outcome.ename != "KeyboardInterrupt" and is_consequential(outcome.ename)


def _mark_consequences(failures: list[WorkerFailure], frozen: dict[int, str]) -> list[WorkerFailure]:
    """Turn the faults that follow from a peer's into one-line consequences of that peer.

    A consequence is an error TensorFlow raises because a peer is gone (``UnavailableError``, an
    aborted or timed-out collective), or an ignored interrupt while a peer had died or raised (the
    worker was waiting for it in a collective) -- unless the process is really stopped (SIGSTOP),
    which makes it a cause. Without any other fault there is nothing to be a consequence of, and
    the errors stay as they are.
    """
    def is_cause(f: WorkerFailure) -> bool:
        if f.kind == "unresponsive":
            return "stopped" in frozen.get(f.worker, "")
        return f.kind == "died" or (f.kind == "error" and not is_consequential(f.ename))

    causes = order_failures([f for f in failures if is_cause(f)])
    if not causes:
        return failures
    peer = causes[0].worker
    out = []
    for f in failures:
        follows = (f.kind == "error" and is_consequential(f.ename)) or (f.kind == "unresponsive" and not is_cause(f))
        if follows and f.worker != peer:
            f = replace(f, kind="consequence", peer=peer, hint="")
        out.append(f)
    return out


def _process_state(worker: RunWorker) -> str:
    """``stopped`` / ``sleeping`` / ... for a local worker process; '' when it can't be seen."""
    pid = worker.handle.pid
    if pid is None or worker.handle.host != "localhost":
        return ""
    try:
        import psutil

        return f"process state: {psutil.Process(pid).status()}"
    except Exception:  # only a detail for the message
        return ""
