"""The async core: N worker kernels that run a cell in lockstep, restarted as a group after a fault.

:class:`AsyncCluster` owns a cell's whole path and holds its collaborators, each with its own state:
the cell kernels (:class:`~mwnotebook.engine.workers.worker_group.WorkerGroup`: launcher, addresses,
environments, workers), the tasks that run no cell (:class:`~mwnotebook.engine.roles.task_roles.TaskRoles`:
a ``--ps`` cluster's servers, the notebook as coordinator), each task's state
(:class:`~mwnotebook.engine.cluster_state.TaskStates`), where its start stands
(:class:`~mwnotebook.engine.start_state.StartState`) and the output that arrives late
(:class:`~mwnotebook.engine.cell.late_output.LateOutput`). One cell's run is
:class:`~mwnotebook.engine.cell.run.CellRun`; its restarts, :func:`~mwnotebook.engine.cell.restarts.run_with_restarts`.

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
import time
from typing import Any

from mwnotebook.config.class_caps import ClassCaps
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import with_thread_defaults
from mwnotebook.engine.cell.fresh_coordinator import needs_fresh_coordinator, rerun_line
from mwnotebook.engine.cell.late_output import LateOutput
from mwnotebook.engine.cell.restarts import HOST_WAIT_SECONDS, CellLimits, RestartOutcome, run_with_restarts
from mwnotebook.engine.cell.result import RunResult
from mwnotebook.engine.cell.run import CellRun, CellVerdict
from mwnotebook.engine.cell.stacks import StacksReport, dump_stacks
from mwnotebook.engine.class_caps import CapsCheck, is_local, spec_tasks
from mwnotebook.engine.cluster_state import TaskStates, ignore_event
from mwnotebook.engine.cluster_status import WorkerInfo, cluster_status
from mwnotebook.engine.roles import notebook_coordinator
from mwnotebook.engine.roles.task_roles import TaskRoles
from mwnotebook.engine.roles.task_servers import ParameterServerLost, TaskServers, not_back_line
from mwnotebook.engine.start_state import StartState
from mwnotebook.engine.usage import UsageReader, WorkerUsage
from mwnotebook.engine.workers.worker import Worker
from mwnotebook.engine.workers.worker_group import WorkerGroup
from mwnotebook.errors import ClusterInterrupted, ClusterStateError, WorkerFailure
from mwnotebook.launchers import Launcher
from mwnotebook.shared.events import EventSink, WorkerOutput

log = logging.getLogger(__name__)

NOT_RUNNING = "no cluster is running: start one first (%%mwtrain or %mwcluster start)"


class AsyncCluster:
    """N worker kernels that run cells in lockstep. All methods run on one event loop."""

    def __init__(self, spec: ClusterSpec | None = None, *, launcher: Launcher | None = None,
                 caps: ClassCaps | None = None, unpublished: str | None = None, **spec_fields: Any) -> None:
        if spec is not None and spec_fields:
            raise TypeError("pass either a ClusterSpec or its fields, not both")
        self.spec = spec if spec is not None else ClusterSpec(**spec_fields)
        #: The teacher's caps checked before a start, the one place every entry point reaches
        #: (engine/class_caps.py). ``unpublished``: what other kernels' refusals call this cluster
        #: when it publishes no state file (``mwnotebook run``).
        self.caps_check = CapsCheck(caps, self.spec, unpublished=unpublished)
        self._layout = self.spec.layout
        #: What the tasks run with: under the teacher's CPU cap (``caps``, config/class_caps.py) a
        #: local cluster's thread pools default to each task's share (config/worker_env.py).
        run_spec = self.spec
        if caps is not None and is_local(self.spec):
            run_spec = with_thread_defaults(self.spec, caps.thread_env(spec_tasks(self.spec)))
        #: The thread-pool variables the tasks get from the CPU cap ({} without one).
        self.thread_defaults = {k: v for k, v in run_spec.env.items() if k not in self.spec.env}
        #: --coordinator notebook: no kernel runs the cell; this process coordinates
        #: (engine/roles/notebook_coordinator.py).
        self._notebook = self.spec.coordinator == "notebook"
        #: Kernels that run the cell: every replica, or a --ps cluster's coordinator alone.
        cell_count = 0 if self._notebook else len(self._layout.cell_tasks())
        #: Output workers send after their cell ended (mwnotebook/engine/cell/late_output.py).
        self.late_output = LateOutput()
        #: ``--max-restarts``: how long fresh workers may fail to start before the cell gives up.
        self.restart_host_wait = HOST_WAIT_SECONDS
        self._states = TaskStates(max(self.spec.workers, cell_count))
        self._group = WorkerGroup(run_spec, self._layout, cell_count, self.late_output, launcher)
        # each worker's CPU and memory, here or on its host (engine/usage.py): Cluster.usage()'s reader,
        # and the status table's while a cell runs (each CPU share over its own reader's interval)
        self._usage = UsageReader()
        self._usage_while_running = UsageReader()
        self._roles = TaskRoles(run_spec, self._layout, self.late_output, self._running_cell_abort)
        #: The start under way, the restart after a failed cell, whether a start completed
        #: (engine/start_state.py).
        self._starts = StartState()
        self._abort: asyncio.Event | None = None
        self._running = False
        self._cell_code: str | None = None
        #: Where workers moved in a restart still under way (lines for its RunRestarted).
        self._moved: list[str] = []

    # -- what one can read ---------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether the cluster has been started (workers running, or the notebook joined as coordinator)."""
        return bool(self._group.workers) or self._roles.joined

    @property
    def workers(self) -> tuple[Worker, ...]:
        """The connections to the kernels that run the cell, in cell order (empty when stopped, and
        while they are replaced). For looking at a worker's kernel handle or client; the cluster
        alone starts, runs and ends them."""
        return self._group.workers

    @property
    def launcher(self) -> Launcher | None:
        """The launcher that placed the workers (None before a start and after a stop, unless given)."""
        return self._group.launcher

    @property
    def addresses(self) -> list[str]:
        """Each worker's TensorFlow server address, as the launcher placed it ([] before a start)."""
        return self._group.addresses

    @property
    def network_isolated(self) -> bool:
        """True when the workers' TensorFlow ports sit in a private network namespace."""
        return self._group.network_isolated

    @property
    def tf_configs(self) -> list[dict[str, Any]]:
        """Each cell kernel's TF_CONFIG, in cell order ([] before a start)."""
        addresses = self._group.addresses
        return [self._layout.tf_config(addresses, t) for t in self._layout.cell_tasks()] if addresses else []

    @property
    def notebook_notice(self) -> str:
        """--coordinator notebook: what listens where, unauthenticated ("" before a start, or otherwise)."""
        return self._roles.notice(self._group.addresses)

    @property
    def servers(self) -> TaskServers | None:
        """A --ps cluster's worker and ps servers (None for other clusters)."""
        return self._roles.servers

    # -- start, restart, stop --------------------------------------------------------------------

    async def start(self, on_event: EventSink | None = None) -> None:
        """Start every worker in parallel and wait until all answer.

        Idempotent; a caller that arrives while a start is under way (say, one begun in the
        background by ``%mwcluster start``) waits for that start instead of beginning another.
        """
        if self.started:
            return
        await self._starts.after_background()  # a failed restart after a failed cell: start afresh
        if self.started:
            return
        await self._starts.join(lambda: self._start(on_event))

    async def _start(self, on_event: EventSink | None) -> None:
        if self._notebook:
            refused = notebook_coordinator.refusal(self.spec.force)
            if refused is not None:
                raise refused
        if self._starts.lived and self._group.launcher is not None:
            await self._leave_the_last_life()
        try:
            await self._group.place()
            await self._start_servers()
            if self._notebook:
                self._roles.join_here(self._group.envs[0]["TF_CONFIG"], self._group.addresses)
                self._states.set(0, "notebook")
                log.info("%s", self.notebook_notice)
                self._starts.lived = True
                return
            await self._group.start(self._states.sink(on_event or ignore_event))
        except BaseException:
            await self._roles.stop_servers()
            await self._group.close()
            raise
        self._starts.lived = True

    async def _leave_the_last_life(self) -> None:
        """Before a start that finds no cell kernels although the cluster ran (a ``--max-restarts``
        restart that could not bring them back, a lost ps whose restart failed, a cell killed during a
        restart): end what is left of that life -- the servers, the launcher's ports, namespace and
        files -- so the start is as fresh as one after ``%mwcluster stop``. Nothing the user made is
        lost here: the variables went with the workers."""
        log.warning("the cluster's workers are gone: starting a fresh cluster")
        await self._group.drop_release()
        await self._group.end(lambda w: w.kill())
        await self._roles.stop_servers()
        await self._group.close()
        self._starts.lived = False

    async def _start_servers(self) -> None:
        launcher = self._group.launcher
        assert launcher is not None
        await self._roles.start_servers(launcher, self._group.addresses)

    async def restart(self, on_event: EventSink | None = None) -> list[str]:
        """Replace every worker process with a fresh one (same TF_CONFIGs, unless tasks moved off a
        failed node: the lines saying where are returned). Variables are lost."""
        if self._notebook:
            raise ClusterStateError(notebook_coordinator.NO_RESTART)
        if not self._group.workers:
            raise ClusterStateError(NOT_RUNNING)
        await self._group.drop_release()
        return await self._renew(self._states.sink(on_event or ignore_event), servers_too=True)

    async def _renew(self, sink: EventSink, servers_too: bool) -> list[str]:
        """What every restart does (``%mwcluster restart``, the restart after a failed cell or a lost
        ps, ``--max-restarts``): the cell kernels killed, every task moved off failed nodes by the
        launcher's one rule (config/slurm_nodes.py; new addresses then), the servers renewed when
        asked, when tasks moved or when a ps is gone, fresh kernels started. The moves' lines."""
        await self._group.drop()
        moved = await self._group.move_off_lost_nodes()
        self._moved += [line for line in moved if line not in self._moved]  # kept if the start fails
        if servers_too or moved or not await self._roles.every_ps_alive():
            await self._start_servers()
        await self._group.start(sink)
        return moved

    async def restart_in_background(self) -> None:
        """Kill every worker now and start fresh ones without waiting for them.

        Used after a failed cell: the error reaches the user at once, and the next ``run`` (or
        ``start``) waits for the new workers.
        """
        await self._group.drop_release()
        await self._group.drop()

        async def start_fresh() -> None:  # after the failed cell's output ended: nobody to tell
            await self._renew(self._states.sink(ignore_event), servers_too=True)

        self._starts.begin_in_background(start_fresh())

    async def stop(self) -> None:
        """Shut every worker down (politely, then by force) and release ports and files."""
        await self._end_workers(kill=False)
        for i in range(self.spec.workers):
            self._states.set(i, "stopped")
        await self._group.close()

    async def kill(self) -> None:
        """Stop every worker at once, no questions asked (used at interpreter exit)."""
        self._group.abort_start()
        await self._end_workers(kill=True)
        for i in range(len(self._states.snapshot())):
            self._states.set(i, "stopped")
        await self._group.close()

    async def _end_workers(self, kill: bool) -> None:
        """What stop and kill share: a start under way is awaited first (so no worker it makes is
        missed), then every worker is ended in parallel, then the servers."""
        await self._starts.settle()
        await self._group.drop_release()
        await self._group.end((lambda w: w.kill()) if kill else (lambda w: w.shutdown()))
        await self._roles.stop_servers()
        if self._roles.leave_here():
            self._states.set(0, "stopped")

    # -- one cell ---------------------------------------------------------------------------------

    def request_abort(self) -> None:
        """Stop the running cell on every worker (the notebook's interrupt). Safe to call any time."""
        if self._abort is not None:
            self._abort.set()

    def _running_cell_abort(self) -> asyncio.Event | None:
        return self._abort if self._running else None

    async def interrupt(self) -> None:
        """Interrupt the running cell, or send SIGINT to every worker when none runs."""
        if self._running:
            self.request_abort()
        else:
            await self._group.interrupt()

    async def run(self, code: str, on_event: EventSink | None = None,
                  timeout: float | None = None,
                  max_restarts: int | None = None, fresh_setup: str | None = None,
                  abort: asyncio.Event | None = None) -> RunResult:
        """Run ``code`` on every worker at once. Raises a :class:`ClusterRunError` subclass on failure.

        After a fault that spoiled the workers the group is restarted in the background (the
        error's ``restarted`` says so). ``max_restarts``
        (default: the spec's): after losing workers, run the cell again on fresh ones up to this
        many times (mwnotebook/engine/cell/restarts.py); ``timeout`` bounds each attempt;
        ``fresh_setup`` runs silently in fresh workers before the cell runs again (the command-line
        runner's ``sys.argv``/``__file__`` preamble). ``abort``: the cell's interrupt, made by a
        caller that may set it before this coroutine has begun (a Ctrl-C in another thread,
        engine/cluster.py); default: a new one, set by :meth:`request_abort`.
        """
        limits = CellLimits.of(timeout, max_restarts, self.spec.max_restarts)
        return await self.run_within(code, limits, on_event, fresh_setup, abort)

    async def run_within(self, code: str, limits: CellLimits, on_event: EventSink | None = None,
                         fresh_setup: str | None = None,
                         abort: asyncio.Event | None = None) -> RunResult:
        """:meth:`run` with its limits already checked (``Cluster.run`` checks them before it starts
        the cluster)."""
        if self._notebook:
            raise ClusterStateError(notebook_coordinator.NO_CELLS)
        if self._running:
            raise ClusterStateError("a cell is already running on this cluster")
        # The cell's abort exists from here on: a Ctrl-C while the cell still waits for a start, a
        # restart or the last cell's release is this cell's interrupt, not lost (request_abort).
        self._running = True
        abort = self._abort = abort or asyncio.Event()
        try:
            await self._ready_for_a_cell(on_event)
            if abort.is_set():
                raise ClusterInterrupted([WorkerFailure(w.index, "interrupted") for w in self._group.workers],
                                         restarted=False,
                                         detail="interrupted before the cell started: it ran on no worker")
        except BaseException:
            self._running = False
            self._abort = None
            raise
        self._cell_code = code
        emit = on_event or ignore_event
        verdict: CellVerdict | None = None
        self._moved = []  # lines of an earlier cell's restart that never completed are not this cell's
        names = self._layout.kernel_names()  # a --ps cluster's "coordinator", the "evaluator"

        async def run_once(sink: EventSink) -> CellVerdict:
            return await CellRun(self._group.workers, code, limits.timeout, abort, sink, names=names).run()

        async def run_with_its_restarts() -> RestartOutcome:
            return await run_with_restarts(
                run_once, lambda: self._replace_workers(fresh_setup, emit), self._states.sink(emit),
                limits.max_restarts, host_wait=self.restart_host_wait, aborted=abort.is_set)
        # each worker's CPU and memory for the status table while the cell runs: engine/usage.py
        usage = (asyncio.ensure_future(self._usage_while_running.poll(lambda: self._group.workers, emit))
                 if on_event else None)
        try:
            try:
                outcome = await run_with_its_restarts()
            finally:
                if usage is not None:
                    usage.cancel()
            if needs_fresh_coordinator(outcome.verdict) and not abort.is_set():
                await self._fresh_coordinator(fresh_setup, emit)
                outcome = await run_with_its_restarts()
            verdict = outcome.verdict
            if lost := self._roles.not_back():
                self._say(emit, not_back_line(lost, [], before_cell=False))
            lost_ps = self._roles.lost_ps if verdict.ok else await self._roles.check_lost_ps()
            if lost_ps is not None:
                # Variables are gone with the ps: only fresh tasks and a fresh coordinator can go on.
                await self.restart_in_background()
                task, how = lost_ps
                raise ParameterServerLost(
                    verdict.failures, restarted=True,
                    detail=f"parameter server {task.name} died ({how}) while the cell ran: the variables "
                           "it held are gone. Every task and the coordinator are restarted; with "
                           "BackupAndRestore or a CheckpointManager the next run resumes from the last "
                           "checkpoint.")
            if verdict.ok:
                return RunResult.of_attempts(outcome.results, outcome.restarts)
            if outcome.start_error is not None:
                raise outcome.start_error
            restart = verdict.workers_spoiled
            if restart:
                await self.restart_in_background()
            raise verdict.error(restarted=restart).with_attempts(outcome.attempts)
        finally:
            if verdict is None or verdict.needs_release():
                self._group.release_later()
            self._running = False
            self._abort = None

    async def _fresh_coordinator(self, setup: str | None, emit: EventSink) -> None:
        """A cell made a second ParameterServerStrategy in the coordinator kernel: replace the cell
        kernels (the servers too if a ps is gone), saying so in one line of the cell's output, before
        the cell runs again (engine/cell/fresh_coordinator.py)."""
        kept = await self._roles.every_ps_alive()
        line = rerun_line(servers_kept=kept)
        self._states.sink(emit)(WorkerOutput(worker=0, msg_type="stream", content={"name": "stderr", "text": line}))
        began = time.monotonic()
        await self._replace_workers(setup, emit)
        log.info("%s (fresh coordinator kernel in %.1f s)", line.strip(), time.monotonic() - began)

    async def _ready_for_a_cell(self, on_event: EventSink | None) -> None:
        """Wait for a start or restart under way and for the last cell's release; restart a
        cluster whose parameter server was lost between cells; start afresh a cluster whose workers
        are gone (a restart that could not bring them back: no dead end)."""
        if not self._group.workers and (self._starts.under_way or self._starts.lived):
            await self.start()
        await self._group.wait_for_release()
        if not self._group.workers:
            raise ClusterStateError(NOT_RUNNING)
        if self._roles.lost_ps is not None:
            log.warning("a parameter server was lost between cells: restarting the whole cluster")
            await self.restart(on_event)
        elif lost := self._roles.not_back():
            # A running coordinator takes a worker back only on its old address (engine/roles/
            # task_servers.py): a fresh cluster, its tasks off the failed node, before the cell.
            log.warning("worker servers not back between cells: restarting the whole cluster")
            moved = await self.restart(on_event)
            self._say(on_event or ignore_event, not_back_line(lost, moved, before_cell=True))

    def _say(self, emit: EventSink, line: str) -> None:
        """One line of mwnotebook's own in the cell's output (kernel 0's stderr)."""
        self._states.sink(emit)(WorkerOutput(worker=0, msg_type="stream", content={"name": "stderr", "text": line}))

    async def _replace_workers(self, setup: str | None, emit: EventSink) -> list[str]:
        """Fresh workers for a cell that lost some (``--max-restarts``): the same TF_CONFIGs, unless
        the launcher moved workers off a lost node (new addresses; the lines saying where are
        returned). On a --ps cluster that lost a parameter server, fresh servers too: the variables
        are gone, and only every task new can go on (the cell's BackupAndRestore then resumes it)."""
        await self._renew(self._states.sink(emit), servers_too=False)
        if setup:
            await self._group.run_fresh_setup(setup)
        said, self._moved = self._moved, []
        return said

    # -- looking inside --------------------------------------------------------------------------

    async def status(self) -> list[WorkerInfo]:
        """Every task: the kernels that run the cell first, then a --ps cluster's servers
        (engine/cluster_status.py)."""
        return await cluster_status(self._layout, self._group.addresses, self._states.snapshot(),
                                    self._group.workers, self._roles.servers, coordinator_here=self._roles.joined)

    async def scheduler_status(self) -> dict[str, Any] | None:
        """The batch job the workers run in (Slurm: job id, nodes, state), or None without one."""
        return await self._group.scheduler_status()

    async def query(self, code: str, timeout: float = 30.0, servers: bool = False) -> list[str | None]:
        """Run a small read-only snippet silently on every worker; each one's stdout (None on error).

        For looking inside the workers (what devices TensorFlow sees) without it counting as a cell.
        ``servers``: a --ps cluster's server kernels are asked too, their answers after the cell
        kernels' in :meth:`status` order (with --coordinator notebook, None first for this process).
        """
        if self._running:
            raise ClusterStateError("a cell is running on this cluster; ask again when it is done")
        await self._group.wait_for_release()

        async def ask(worker: Worker | None) -> str | None:
            if worker is None:
                return None
            out: list[str] = []

            def collect(msg: dict[str, Any]) -> None:
                if msg["msg_type"] == "stream" and msg["content"].get("name") == "stdout":
                    out.append(msg["content"].get("text", ""))
            try:
                outcome = await asyncio.wait_for(worker.execute(code, collect, silent=True), timeout)
            except asyncio.TimeoutError:
                return None
            return "".join(out) if outcome.status == "ok" else None

        asked: list[Worker | None] = list(self._group.workers)
        task_servers = self._roles.servers
        if servers and task_servers is not None:
            if self._roles.joined:
                asked.insert(0, None)
            asked += [task_servers.server(task) for task in task_servers.tasks()]
        return list(await asyncio.gather(*(ask(w) for w in asked)))

    async def usage(self) -> list[WorkerUsage]:
        """Every cell kernel's CPU share and resident memory, read on its own host (engine/usage.py)."""
        return await self._usage.read(self._group.workers)

    async def stacks(self) -> StacksReport:
        """Every worker's current Python stacks, main thread first; works while a cell is blocked."""
        return await dump_stacks(self._group.workers, self._cell_code)
