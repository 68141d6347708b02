"""One cell on every worker of a cluster: the lockstep wait, stopping the rest after a fault, and
the verdict (which worker failed first, and whether the group must be restarted)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from mwnotebook.engine.bootstrap import SETTLE_EXPRESSION
from mwnotebook.engine.connection import ExecutionOutcome, Worker
from mwnotebook.engine.diagnose import diagnose, is_consequential
from mwnotebook.engine.relay import events_from_iopub
from mwnotebook.engine.result import RunResult
from mwnotebook.engine.stacks import attach as attach_stacks
from mwnotebook.engine.stacks import dump_stacks
from mwnotebook.errors import (
    ClusterInterrupted,
    ClusterRunError,
    ClusterTimeoutError,
    WorkerDiedError,
    WorkerError,
    WorkerFailure,
)

if TYPE_CHECKING:
    from mwnotebook.engine.async_cluster import AsyncCluster

#: How often worker processes are checked for death while a cell runs.
LIVENESS_POLL_SECONDS = 0.2
#: How long interrupted workers get to stop before the group is restarted.
INTERRUPT_GRACE_SECONDS = 2.0
#: After one worker fails, how long the others may take to finish by themselves (the same error
#: everywhere arrives a few milliseconds apart) before they are interrupted.
SETTLE_SECONDS = 0.5

#: Which fault is most likely the cause, first: a dead process, a real error (or the worker still
#: running at the deadline), a worker that ignored its interrupt (frozen, or blocked in native
#: code), errors that are consequences of a peer's fault, and workers we interrupted ourselves.
_PRIORITY = {"died": 0, "timeout": 1, "error": 1, "unresponsive": 1.5, "consequence": 2, "interrupted": 3}


class CellRun:
    """One cell on every worker: the wait, the abort, and the verdict."""

    def __init__(self, cluster: AsyncCluster, code: str, timeout: float | None, restart_allowed: bool) -> None:
        self.restart_allowed = restart_allowed
        self.cluster = cluster
        self.code = code
        self.timeout = timeout
        self.workers = list(cluster._workers)
        self.result = RunResult(len(self.workers), log_paths=[w.output_log for w in self.workers])
        self.finish_order: list[int] = []
        self.dead: dict[int, str] = {}
        self.interrupted: set[int] = set()
        self.unresponsive: set[int] = set()

    def needs_release(self) -> bool:
        """Whether any worker holds replaced objects to free between cells (unknown counts as yes)."""
        return any(o is None or o.status != "ok" or o.expression("settle") == "True"
                   for o in self.result.outcomes)

    def _on_output(self, index: int):
        def handle(msg: dict[str, Any]) -> None:
            for event in events_from_iopub(index, msg):
                self.result.add(event)
                self.cluster._safe_emit(event)
        return handle

    async def run(self) -> RunResult:
        started = time.monotonic()
        for w in self.workers:
            self.cluster._set_state(w.index, "running")
        tasks = {w.index: asyncio.ensure_future(w.execute(self.code, self._on_output(w.index),
                                                          user_expressions={"settle": SETTLE_EXPRESSION}))
                 for w in self.workers}
        deadline = None if self.timeout is None else started + self.timeout
        trigger = await self._wait(tasks, deadline)
        self.result.elapsed = time.monotonic() - started
        if trigger is None:
            return self.result
        # Where each worker is (taken before the interrupt changes it; issue 12): on timeout, or of
        # the workers that ignored their interrupt.
        stacks = await dump_stacks(self.workers, self.code) if trigger == "timeout" else None
        if trigger in ("failure", "died"):
            await self._settle(tasks)
        await self._stop_the_rest(tasks)
        if stacks is None and self.unresponsive:
            stacks = await dump_stacks([w for w in self.workers if w.index in self.unresponsive], self.code)
        self.result.elapsed = time.monotonic() - started
        failures = self._failures(trigger)
        restart = self.restart_allowed and (bool(self.interrupted or self.dead) or any(
            (d := diagnose(f.ename, f.evalue)) is not None and d.needs_restart for f in failures))
        if restart:
            await self.cluster.restart_in_background()
        error = _error_class(trigger, self.dead)(failures, restarted=restart)
        if stacks is not None:
            attach_stacks(error, stacks)
        raise error

    def _collect(self, tasks: dict[int, asyncio.Future[ExecutionOutcome]]) -> bool:
        """Record finished outcomes; True if any of them failed."""
        failed = False
        for index, task in tasks.items():
            if not task.done() or self.result.outcomes[index] is not None:
                continue
            try:
                outcome = task.result()
            except asyncio.CancelledError:
                continue
            except Exception as exc:  # noqa: BLE001 - a lost channel counts as a dead worker
                self.dead.setdefault(index, f"connection lost: {type(exc).__name__}")
                failed = True
                continue
            self.result.outcomes[index] = outcome
            self.finish_order.append(index)
            if outcome.status == "ok":
                self.cluster._set_state(index, "done")
            else:
                failed = True
                self.cluster._set_state(index, "failed", outcome.ename)
        return failed

    async def _find_dead(self) -> bool:
        for w in self.workers:
            if w.index not in self.dead and not await w.handle.is_alive():
                self.dead[w.index] = w.handle.exit_description() or "exited"
                self.cluster._set_state(w.index, "failed", self.dead[w.index])
        return bool(self.dead)

    async def _wait(self, tasks: dict[int, asyncio.Future[ExecutionOutcome]],
                    deadline: float | None) -> str | None:
        abort = self.cluster._abort
        assert abort is not None
        abort_wait = asyncio.ensure_future(abort.wait())
        try:
            while True:
                if self._collect(tasks):
                    return "failure"
                pending = [t for t in tasks.values() if not t.done()]
                if not pending:
                    return None
                if await self._find_dead():
                    return "died"
                if abort.is_set():
                    return "interrupted"
                wait = LIVENESS_POLL_SECONDS
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return "timeout"
                    wait = min(wait, remaining)
                await asyncio.wait([*pending, abort_wait], timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        finally:
            abort_wait.cancel()

    async def _settle(self, tasks: dict[int, asyncio.Future[ExecutionOutcome]]) -> None:
        pending = [t for t in tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=SETTLE_SECONDS)
        self._collect(tasks)

    async def _stop_the_rest(self, tasks: dict[int, asyncio.Future[ExecutionOutcome]]) -> None:
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
        for task in tasks.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)

    def _failures(self, trigger: str) -> list[WorkerFailure]:
        failures: list[tuple[int, int, WorkerFailure]] = []
        for w in self.workers:
            i = w.index
            outcome = self.result.outcomes[i]
            order = self.finish_order.index(i) if i in self.finish_order else len(self.workers)
            if i in self.dead:
                failures.append((_PRIORITY["died"], order, WorkerFailure(i, "died", exit_description=self.dead[i])))
            elif i in self.unresponsive and trigger in ("failure", "died"):
                failures.append((_PRIORITY["unresponsive"], order, WorkerFailure(
                    i, "unresponsive", exit_description=w.handle.exit_description() or _process_state(w))))
            elif i in self.interrupted:
                kind = "timeout" if trigger == "timeout" else "interrupted"
                f = WorkerFailure(i, kind, ename=outcome.ename if outcome else "",
                                  evalue=outcome.evalue if outcome else "",
                                  traceback=outcome.traceback if outcome else [])
                failures.append((_PRIORITY[kind], order, f))
            elif outcome is not None and outcome.status != "ok":
                d = diagnose(outcome.ename, outcome.evalue)
                kind = "consequence" if is_consequential(outcome.ename) else "error"
                f = WorkerFailure(i, "error", ename=outcome.ename, evalue=outcome.evalue,
                                  traceback=outcome.traceback, hint=d.hint if d else "")
                failures.append((_PRIORITY[kind], order, f))
        failures.sort(key=lambda item: (item[0], item[1]))
        return [f for _, _, f in failures]


def _process_state(worker: Worker) -> str:
    """``stopped`` / ``sleeping`` / ... for a local worker process; '' when it can't be seen."""
    pid = worker.handle.pid
    if pid is None or worker.handle.host != "localhost":
        return ""
    try:
        import psutil

        return f"process state: {psutil.Process(pid).status()}"
    except Exception:  # noqa: BLE001 - only a detail for the message
        return ""


def _error_class(trigger: str, dead: dict[int, str]) -> type[ClusterRunError]:
    if trigger == "interrupted":
        return ClusterInterrupted
    if trigger == "timeout":
        return ClusterTimeoutError
    if dead:
        return WorkerDiedError
    return WorkerError
