"""One cell on every worker at once under one deadline, with the restarts that follow a fault.

Failure policy. A failing worker usually leaves its peers blocked inside a collective, where an
interrupt may not reach them (measured: a blocked tf_keras ``fit`` ignores SIGINT). So on the first
fault the others get SIGINT and ``interrupt_grace`` seconds to stop (engine/cell/run.py); then, if
any worker had to be stopped, died, or is in a state TensorFlow cannot recover from, the whole
group is restarted with the same TF_CONFIGs. If every worker finished on its own (say, the same
NameError everywhere), the workers and their variables are kept. With ``--max-restarts`` the cell
runs again on fresh workers (engine/cell/restarts.py).
"""

from __future__ import annotations

import asyncio
import logging

from mwnotebook.config.roles import layout_of
from mwnotebook.config.worker_env import worker_envs
from mwnotebook.engine.cell.restarts import check_max_restarts, run_with_restarts
from mwnotebook.engine.cell.result import RunResult
from mwnotebook.engine.cell.run import CellRun, CellVerdict
from mwnotebook.engine.cluster_state import ignore_event
from mwnotebook.engine.roles import notebook_coordinator
from mwnotebook.engine.roles.task_servers import ParameterServerLost
from mwnotebook.engine.workers.bootstrap import RELEASE_CODE
from mwnotebook.engine.workers.connection import Worker
from mwnotebook.engine.workers.lifecycle import WorkerLifecycle
from mwnotebook.errors import ClusterInterrupted, ClusterStartError, ClusterStateError, WorkerFailure
from mwnotebook.launchers.capabilities import ReplacesNodes
from mwnotebook.shared.events import Event, EventSink

log = logging.getLogger(__name__)


class CellRunner(WorkerLifecycle):
    """Run a cell, abort or interrupt it, and replace or keep the workers after it."""

    def request_abort(self) -> None:
        """Stop the running cell on every worker (the notebook's interrupt). Safe to call any time."""
        if self._abort is not None:
            self._abort.set()

    async def interrupt(self) -> None:
        """Interrupt the running cell, or send SIGINT to every worker when none runs."""
        if self._running:
            self.request_abort()
        else:
            await asyncio.gather(*(w.handle.interrupt() for w in self._workers))

    async def run(self, code: str, on_event: EventSink | None = None,
                  timeout: float | None = None, restart_on_failure: bool = True,
                  max_restarts: int | None = None, fresh_setup: str | None = None,
                  abort: asyncio.Event | None = None) -> RunResult:
        """Run ``code`` on every worker at once. Raises a :class:`ClusterRunError` subclass on failure.

        ``restart_on_failure=False`` skips the group restart after a fault (for callers that stop
        the cluster next anyway, like the command-line runner); the error's ``restarted`` says
        which happened. ``max_restarts`` (default: the spec's): after losing workers, run the cell
        again on fresh ones up to this many times (mwnotebook/engine/cell/restarts.py); ``timeout``
        bounds each attempt; ``fresh_setup`` runs silently in fresh workers before the cell runs
        again (the command-line runner's ``sys.argv``/``__file__`` preamble). ``abort``: the cell's
        interrupt, made by a caller that may set it before this coroutine has begun (a Ctrl-C in
        another thread, engine/cluster.py); default: a new one, set by :meth:`request_abort`.
        """
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if self._notebook:
            raise ClusterStateError(notebook_coordinator.NO_CELLS)
        restarts = check_max_restarts(self.spec.max_restarts if max_restarts is None else max_restarts)
        if self._running:
            raise ClusterStateError("a cell is already running on this cluster")
        # The cell's abort exists from here on: a Ctrl-C while the cell still waits for a start, a
        # restart or the last cell's release is this cell's interrupt, not lost (request_abort).
        self._running = True
        abort = self._abort = abort or asyncio.Event()
        try:
            await self._ready_for_a_cell(on_event)
            if abort.is_set():
                raise ClusterInterrupted([WorkerFailure(w.index, "interrupted") for w in self._workers],
                                         restarted=False,
                                         detail="interrupted before the cell started: it ran on no worker")
        except BaseException:
            self._running = False
            self._abort = None
            raise
        self._cell_code = code
        emit = on_event or ignore_event

        def observe(event: Event) -> None:
            self._observe(event, emit)
        verdict: CellVerdict | None = None
        self._moved = []  # lines of an earlier cell's restart that never completed are not this cell's
        names = layout_of(self.spec).kernel_names()  # a --ps cluster's "coordinator", the "evaluator"

        async def run_once(sink: EventSink) -> CellVerdict:
            verdict = await CellRun(self._workers, code, timeout, abort, sink).run()
            for failure in verdict.failures:
                failure.name = names.get(failure.worker, "")
            return verdict
        try:
            outcome = await run_with_restarts(
                run_once,
                lambda: self._replace_workers(fresh_setup, emit), observe, restarts, host_wait=self.restart_host_wait,
                aborted=abort.is_set)
            verdict = outcome.verdict
            lost_ps = self._servers.lost_ps if self._servers is not None else None
            if lost_ps is not None:
                # Variables are gone with the ps: only fresh tasks and a fresh coordinator can go on.
                if restart_on_failure:
                    await self.restart_in_background()
                task, how = lost_ps
                raise ParameterServerLost(
                    verdict.failures, restarted=restart_on_failure,
                    detail=f"parameter server {task.name} died ({how}) while the cell ran: the variables "
                           "it held are gone. Every task and the coordinator are restarted; with "
                           "BackupAndRestore or a CheckpointManager the next run resumes from the last "
                           "checkpoint.")
            if verdict.ok:
                return RunResult.of_attempts(outcome.results, outcome.restarts)
            if outcome.start_error is not None:
                raise outcome.start_error
            restart = restart_on_failure and verdict.workers_spoiled
            if restart:
                await self.restart_in_background()
            raise verdict.error(restarted=restart).with_attempts(outcome.attempts)
        finally:
            if self._workers and (verdict is None or verdict.needs_release()):
                self._release_task = asyncio.ensure_future(self._release(list(self._workers)))
            self._running = False
            self._abort = None

    async def _ready_for_a_cell(self, on_event: EventSink | None) -> None:
        """Wait for a start or restart under way and for the last cell's release; restart a
        cluster whose parameter server was lost between cells."""
        if not self._workers and self._start_task is not None:
            await self.start()
        if self._release_task is not None:
            await asyncio.gather(self._release_task, return_exceptions=True)
            self._release_task = None
        if not self._workers:
            raise ClusterStateError("no cluster is running: start one first (%%mwtrain or %mwcluster start)")
        if self._servers is not None and self._servers.lost_ps is not None:
            log.warning("a parameter server was lost between cells: restarting the whole cluster")
            await self.restart(on_event)

    async def _replace_workers(self, setup: str | None, emit: EventSink) -> list[str]:
        """Fresh workers for a cell that lost some (``--max-restarts``): the same TF_CONFIGs, unless
        the launcher moved workers off a lost node (new addresses; the lines saying where are
        returned). On a --ps cluster that lost a parameter server, fresh servers too: the variables
        are gone, and only every task new can go on (the cell's BackupAndRestore then resumes it)."""
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.kill() for w in workers), return_exceptions=True)
        launcher = self._launcher
        assert launcher is not None
        moved = await launcher.replace_lost_nodes() if isinstance(launcher, ReplacesNodes) else []
        if moved:
            self._addresses = await launcher.tf_addresses(len(layout_of(self.spec).training_tasks()))
            self._envs = worker_envs(self.spec, self._addresses)
            self._moved += [line for line in moved if line not in self._moved]
        if moved or (self._servers is not None and not await self._servers.every_ps_alive()):
            await self._start_servers()
        self._workers = await self._start_workers(emit)
        if setup:
            outcomes = await asyncio.gather(*(w.execute(setup, lambda _m: None, silent=True) for w in self._workers))
            failed = [w.index for w, o in zip(self._workers, outcomes) if o.status != "ok"]
            if failed:
                raise ClusterStartError(f"worker {failed[0]} failed the set-up of a fresh worker", worker=failed[0])
        said, self._moved = self._moved, []
        return said

    async def _release(self, workers: list[Worker]) -> None:
        """Let every worker free what the last cell replaced, now that no collective is in flight.

        Runs in the background after a cell; the next cell waits for it (see worker/_lifetime.py).
        """
        async def release(worker: Worker) -> None:
            try:
                await asyncio.wait_for(worker.execute(RELEASE_CODE, lambda _m: None, silent=True), 30)
            except Exception:  # a worker that cannot release is dealt with by the next cell
                log.debug("worker %d did not release", worker.index, exc_info=True)
        await asyncio.gather(*(release(w) for w in workers))
