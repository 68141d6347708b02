"""The async core: start N workers, run a cell on all of them at once under one deadline, watch
their liveness, stop all of them on the first failure, restart the group.

Failure policy. A failing worker usually leaves its peers blocked inside a collective, where an
interrupt may not reach them (measured: a blocked tf_keras ``fit`` ignores SIGINT). So on the first
fault the others get SIGINT and ``interrupt_grace`` seconds to stop; then, if any worker had to be
stopped, died, or is in a state TensorFlow cannot recover from, the whole group is restarted with
the same TF_CONFIGs. If every worker finished on its own (say, the same NameError everywhere), the
workers and their variables are kept.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mwnotebook.config.roles import layout_of
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import task_envs, worker_envs
from mwnotebook.engine import notebook_coordinator
from mwnotebook.engine.bootstrap import RELEASE_CODE, setup_code
from mwnotebook.engine.cell_run import CellRun, CellVerdict
from mwnotebook.engine.cluster_status import WorkerInfo, cluster_status
from mwnotebook.engine.connection import Worker
from mwnotebook.engine.diagnose import diagnose
from mwnotebook.engine.late_output import LateOutput
from mwnotebook.engine.restarts import HOST_WAIT_SECONDS, check_max_restarts, run_with_restarts
from mwnotebook.engine.result import RunResult
from mwnotebook.engine.stacks import StacksReport, dump_stacks
from mwnotebook.engine.task_servers import ParameterServerLost, TaskServers
from mwnotebook.errors import ClusterStartError, ClusterStateError
from mwnotebook.launchers import Launcher, make_launcher
from mwnotebook.launchers.capabilities import AbortsStart, Isolates, ReplacesNodes, ReportsJob
from mwnotebook.shared.events import Event, EventSink, WorkerState, WorkerStateChanged

log = logging.getLogger(__name__)

#: Seconds a --ps cluster's coordinator gets to fail on its own after a parameter server is lost
#: before its cell is aborted (it normally raises UnavailableError at once).
PS_LOSS_GRACE = 15.0



def _ignore(_: Event) -> None:
    pass


class AsyncCluster:
    """N worker kernels that run cells in lockstep. All methods run on one event loop."""

    def __init__(self, spec: ClusterSpec | None = None, *, launcher: Launcher | None = None,
                 **spec_fields: Any) -> None:
        if spec is not None and spec_fields:
            raise TypeError("pass either a ClusterSpec or its fields, not both")
        self.spec = spec if spec is not None else ClusterSpec(**spec_fields)
        self._launcher = launcher
        self._workers: list[Worker] = []
        self._envs: list[dict[str, str]] = []
        self._addresses: list[str] = []
        #: --coordinator notebook: no kernel runs the cell; this process coordinates
        #: (engine/notebook_coordinator.py). True once it has the chief's TF_CONFIG.
        self._notebook = self.spec.coordinator == "notebook"
        self._joined = False
        #: Kernels that run the cell: every replica, or a --ps cluster's coordinator alone.
        self._cell_count = 0 if self._notebook else len(layout_of(self.spec).cell_tasks())
        #: A --ps cluster's worker and ps servers (engine/task_servers.py); None otherwise.
        self._servers: TaskServers | None = None
        #: Aborts a --ps cluster's cell PS_LOSS_GRACE s after a lost ps, unless the servers are renewed first.
        self._ps_loss_timer: asyncio.TimerHandle | None = None
        self._states: list[str] = ["stopped"] * max(self.spec.workers, self._cell_count)
        self._abort: asyncio.Event | None = None
        self._running = False
        self._start_task: asyncio.Future[None] | None = None
        self._release_task: asyncio.Future[None] | None = None
        self._cell_code: str | None = None
        #: ``--max-restarts``: how long fresh workers may fail to start before the cell gives up.
        self.restart_host_wait = HOST_WAIT_SECONDS
        #: Where workers moved in a restart still under way (lines for its RunRestarted).
        self._moved: list[str] = []
        #: Output workers send after their cell ended (mwnotebook/engine/late_output.py).
        self.late_output = LateOutput()

    # ----------------------------------------------------------------- lifecycle
    @property
    def started(self) -> bool:
        return bool(self._workers) or self._joined

    @property
    def addresses(self) -> list[str]:
        return list(self._addresses)

    @property
    def network_isolated(self) -> bool:
        """True when the workers' TensorFlow ports sit in a private network namespace."""
        return isinstance(self._launcher, Isolates) and self._launcher.isolated

    @property
    def tf_configs(self) -> list[dict[str, Any]]:
        layout = layout_of(self.spec)
        return [layout.tf_config(self._addresses, t) for t in layout.cell_tasks()] if self._addresses else []

    async def start(self, on_event: EventSink | None = None) -> None:
        """Start every worker in parallel and wait until all answer.

        Idempotent; a caller that arrives while a start is under way (say, one begun in the
        background by ``%mwcluster start``) waits for that start instead of beginning another.
        """
        if self._workers or self._joined:
            return
        if self._start_task is None:
            task = asyncio.ensure_future(self._start(on_event))
            task.add_done_callback(self._start_finished)
            self._start_task = task
        await asyncio.shield(self._start_task)

    def _start_finished(self, task: asyncio.Future[None]) -> None:
        if self._start_task is task:
            self._start_task = None
        if not task.cancelled():
            task.exception()  # retrieved here so a failed background start is not logged as lost

    async def _drop_release(self) -> None:
        if self._release_task is not None:
            self._release_task.cancel()
            await asyncio.gather(self._release_task, return_exceptions=True)
            self._release_task = None

    async def _finish_pending_start(self) -> None:
        """Let a start that is under way complete, so that stop/kill see (and end) every kernel."""
        if self._start_task is not None:
            await asyncio.gather(asyncio.shield(self._start_task), return_exceptions=True)

    async def _start(self, on_event: EventSink | None) -> None:
        emit = on_event or _ignore
        if self._notebook:
            refused = notebook_coordinator.refusal(self.spec.force)
            if refused is not None:
                raise refused
        if self._launcher is None:
            self._launcher = make_launcher(self.spec)
        try:
            self._addresses = await self._launcher.tf_addresses(len(layout_of(self.spec).training_tasks()))
            self._envs = worker_envs(self.spec, self._addresses)
            await self._start_servers()
            if self._notebook:
                self._join_here()
                return
            self._workers = await self._start_workers(emit)
        except BaseException:
            await self._close_launcher()
            raise

    async def _start_workers(self, emit: EventSink) -> list[Worker]:
        """Start, connect and set up a worker per task; ``emit`` hears their state changes (the
        sink of whoever asked: a start, a restart, a cell's run)."""
        assert self._launcher is not None
        launcher = self._launcher
        for i in range(self._cell_count):
            self._set_state(i, "starting", emit)
        started = await asyncio.gather(*(launcher.start(i, env) for i, env in enumerate(self._envs)),
                                       return_exceptions=True)
        workers = [Worker(h, env, self.late_output) for h, env in zip(started, self._envs)
                   if not isinstance(h, BaseException)]
        failed = [exc for exc in started if isinstance(exc, BaseException)]
        try:
            if failed:
                raise failed[0]
            connected = await asyncio.gather(*(w.connect(self.spec.startup_timeout) for w in workers),
                                             return_exceptions=True)
            errors = [exc for exc in connected if isinstance(exc, BaseException)]
            if errors:
                raise errors[0]
            await self._run_setup(workers)
        except BaseException:
            await asyncio.gather(*(w.kill() for w in workers), return_exceptions=True)
            for i in range(self._cell_count):
                self._set_state(i, "stopped", emit)
            raise
        for w in workers:
            self._set_state(w.index, "idle", emit)
        return workers

    def _join_here(self) -> None:
        """--coordinator notebook: this process takes the chief's variables (its servers serve)."""
        chief = layout_of(self.spec).cell_tasks()[0]
        notebook_coordinator.join(self._envs[0]["TF_CONFIG"], layout_of(self.spec).address_of(self._addresses, chief),
                                  self.spec.use_legacy_keras)
        self._envs = []
        self._joined = True
        self._states[0] = "notebook"
        log.info("%s", self.notebook_notice)

    @property
    def notebook_notice(self) -> str:
        """--coordinator notebook: what listens where, unauthenticated ("" before a start, or otherwise)."""
        if not self._joined or self._servers is None:
            return ""
        return notebook_coordinator.notice_for(layout_of(self.spec), self._addresses)

    def _leave_here(self) -> None:
        if self._joined:
            notebook_coordinator.leave()
            self._joined = False
            self._states[0] = "stopped"

    async def _run_setup(self, workers: list[Worker]) -> None:
        code = setup_code(self.spec)
        if not code:
            return
        outcomes = await asyncio.gather(*(w.execute(code, lambda _m: None, silent=True) for w in workers))
        for w, outcome in zip(workers, outcomes):
            if outcome.status != "ok":
                hint = diagnose(outcome.ename, outcome.evalue)
                raise ClusterStartError(
                    f"worker {w.index} on {w.handle.host} failed its set-up ({outcome.ename}: "
                    f"{outcome.evalue}).{' ' + hint.hint if hint else ''}", worker=w.index, host=w.handle.host)

    async def restart(self, on_event: EventSink | None = None) -> None:
        """Replace every worker process with a fresh one (same TF_CONFIGs). Variables are lost."""
        if self._notebook:
            raise ClusterStateError(notebook_coordinator.NO_RESTART)
        if not self._workers:
            raise ClusterStateError("no cluster is running: start one first (%%mwtrain or %mwcluster start)")
        await self._drop_release()
        await asyncio.gather(*(w.kill() for w in self._workers), return_exceptions=True)
        self._workers = []
        await self._start_servers()
        self._workers = await self._start_workers(on_event or _ignore)

    async def restart_in_background(self) -> None:
        """Kill every worker now and start fresh ones without waiting for them.

        Used after a failed cell: the error reaches the user at once, and the next ``run`` (or
        ``start``) waits for the new workers.
        """
        await self._drop_release()
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.kill() for w in workers), return_exceptions=True)

        async def start_fresh() -> None:  # after the failed cell's output ended: nobody to tell
            await self._start_servers()
            self._workers = await self._start_workers(_ignore)

        task = asyncio.ensure_future(start_fresh())
        task.add_done_callback(self._start_finished)
        self._start_task = task

    async def stop(self) -> None:
        """Shut every worker down (politely, then by force) and release ports and files."""
        await self._finish_pending_start()
        await self._drop_release()
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        await self._stop_servers()
        self._leave_here()
        for i in range(self.spec.workers):
            self._states[i] = "stopped"
        await self._close_launcher()

    async def kill(self) -> None:
        """Stop every worker at once, no questions asked (used at interpreter exit)."""
        if isinstance(self._launcher, AbortsStart):
            # a start waiting in a scheduler's queue ends now (Slurm: the job is cancelled)
            self._launcher.abort_start()
        await self._finish_pending_start()
        await self._drop_release()
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.kill() for w in workers), return_exceptions=True)
        await self._stop_servers()
        self._leave_here()
        await self._close_launcher()

    async def _start_servers(self) -> None:
        """A --ps cluster's worker and ps servers, (re)started before the coordinator that uses them."""
        layout = layout_of(self.spec)
        if not layout.parameter_server:
            return
        if self._ps_loss_timer is not None:  # the loss it watched is handled: every server is new
            self._ps_loss_timer.cancel()
            self._ps_loss_timer = None
        await self._stop_servers()
        assert self._launcher is not None
        envs = task_envs(self.spec, self._addresses)
        self._servers = TaskServers(self._launcher, {t: envs[t] for t in layout.server_tasks()},
                                    self.spec.startup_timeout, self.late_output, self._lost_ps_during_cell)
        await self._servers.start()

    async def _stop_servers(self) -> None:
        if self._servers is not None:
            await self._servers.kill()
            self._servers = None

    def _lost_ps_during_cell(self) -> None:
        """The coordinator normally fails on its own at once (UnavailableError); never let it hang.

        The timer sets the abort event of the cell that was running when the ps was lost, never a
        later one's: a rerun started within the grace on the restarted cluster must not be stopped."""
        if self._running and self._abort is not None:
            self._ps_loss_timer = asyncio.get_running_loop().call_later(PS_LOSS_GRACE, self._abort.set)

    @property
    def servers(self) -> TaskServers | None:
        """A --ps cluster's worker and ps servers (None for other clusters)."""
        return self._servers

    async def _close_launcher(self) -> None:
        if self._launcher is not None:
            await self._launcher.close()
            self._launcher = None

    async def status(self) -> list[WorkerInfo]:
        """Every task: the kernels that run the cell first, then a --ps cluster's servers
        (engine/cluster_status.py)."""
        return await cluster_status(layout_of(self.spec), self._addresses, self._states, self._workers,
                                    self._servers, coordinator_here=self._joined)

    async def scheduler_status(self) -> dict[str, Any] | None:
        """The batch job the workers run in (Slurm: job id, nodes, state), or None without one."""
        return await self._launcher.status() if isinstance(self._launcher, ReportsJob) else None

    async def query(self, code: str, timeout: float = 30.0, servers: bool = False) -> list[str | None]:
        """Run a small read-only snippet silently on every worker; each one's stdout (None on error).

        For looking inside the workers (what devices TensorFlow sees) without it counting as a cell.
        ``servers``: a --ps cluster's server kernels are asked too, their answers after the cell
        kernels' in :meth:`status` order (with --coordinator notebook, None first for this process).
        """
        if self._running:
            raise ClusterStateError("a cell is running on this cluster; ask again when it is done")
        if self._release_task is not None:
            await asyncio.gather(self._release_task, return_exceptions=True)

        async def ask(worker: Worker) -> str | None:
            out: list[str] = []

            def collect(msg: dict[str, Any]) -> None:
                if msg["msg_type"] == "stream" and msg["content"].get("name") == "stdout":
                    out.append(msg["content"].get("text", ""))
            try:
                outcome = await asyncio.wait_for(worker.execute(code, collect, silent=True), timeout)
            except asyncio.TimeoutError:
                return None
            return "".join(out) if outcome.status == "ok" else None

        asked: list[Worker | None] = list(self._workers)
        if servers and self._servers is not None:
            if self._joined:
                asked.insert(0, None)
            asked += [self._servers.server(task) for task in self._servers.tasks()]

        async def answer(worker: Worker | None) -> str | None:
            return None if worker is None else await ask(worker)
        return list(await asyncio.gather(*(answer(w) for w in asked)))

    async def stacks(self) -> StacksReport:
        """Every worker's current Python stacks, main thread first; works while a cell is blocked."""
        return await dump_stacks(self._workers, self._cell_code)

    # ----------------------------------------------------------------- running cells
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
                  max_restarts: int | None = None, fresh_setup: str | None = None) -> RunResult:
        """Run ``code`` on every worker at once. Raises a :class:`ClusterRunError` subclass on failure.

        ``restart_on_failure=False`` skips the group restart after a fault (for callers that stop
        the cluster next anyway, like the command-line runner); the error's ``restarted`` says
        which happened. ``max_restarts`` (default: the spec's): after losing workers, run the cell
        again on fresh ones up to this many times (mwnotebook/engine/restarts.py); ``timeout``
        bounds each attempt; ``fresh_setup`` runs silently in fresh workers before the cell runs
        again (the command-line runner's ``sys.argv``/``__file__`` preamble).
        """
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if self._notebook:
            raise ClusterStateError(notebook_coordinator.NO_CELLS)
        restarts = check_max_restarts(self.spec.max_restarts if max_restarts is None else max_restarts)
        if not self._workers and self._start_task is not None:
            await self.start()  # a start or restart under way: wait for it
        if self._release_task is not None:
            await asyncio.gather(self._release_task, return_exceptions=True)
            self._release_task = None
        if not self._workers:
            raise ClusterStateError("no cluster is running: start one first (%%mwtrain or %mwcluster start)")
        if self._running:
            raise ClusterStateError("a cell is already running on this cluster")
        if self._servers is not None and self._servers.lost_ps is not None:
            log.warning("a parameter server was lost between cells: restarting the whole cluster")
            await self.restart(on_event)
        self._running = True
        self._cell_code = code
        emit = on_event or _ignore

        def observe(event: Event) -> None:
            self._observe(event, emit)
        self._abort = asyncio.Event()
        verdict: CellVerdict | None = None
        abort = self._abort
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

    def _set_state(self, index: int, state: WorkerState, emit: EventSink, error: str = "") -> None:
        self._observe(WorkerStateChanged(worker=index, state=state, error=error), emit)

    def _observe(self, event: Event, emit: EventSink) -> None:
        """Every event of the cluster passes here: worker states are kept, then ``emit`` (the sink of
        the operation the event belongs to, handed down, never kept on the cluster) is told."""
        if isinstance(event, WorkerStateChanged):
            self._states[event.worker] = event.state
        try:
            emit(event)
        except Exception:  # a broken observer must not break the run
            log.exception("event observer failed on %r", event)
