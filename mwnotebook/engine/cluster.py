"""The typed, blocking facade over :class:`~mwnotebook.engine.async_cluster.AsyncCluster` for notebook cells and
scripts. Every method is explicit (no attribute forwarding), and events from a running cell are
handed to ``on_event`` in the *caller's* thread, so a notebook's output lands in the right cell."""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import queue
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from mwnotebook.config.class_caps import ClassCaps
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.engine.async_cluster import AsyncCluster
from mwnotebook.engine.cell.late_output import LateOutput
from mwnotebook.engine.cell.restarts import CellLimits
from mwnotebook.engine.cell.result import RunResult
from mwnotebook.engine.cell.stacks import StacksReport
from mwnotebook.engine.cluster_status import WorkerInfo
from mwnotebook.engine.interrupts import INTERRUPT, SigintToQueue
from mwnotebook.engine.loop import background_loop
from mwnotebook.engine.usage import WorkerUsage
from mwnotebook.engine.workers.worker import Worker
from mwnotebook.errors import STACKS_HEADING
from mwnotebook.launchers import Launcher
from mwnotebook.registry.publication import Publication
from mwnotebook.shared.events import Event, EventSink

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_DONE = object()
_NOTHING = object()  # the queue was empty
_live: weakref.WeakSet[Cluster] = weakref.WeakSet()


class Cluster:
    """N TensorFlow worker kernels that run code in lockstep.

    >>> with Cluster(workers=2, cpu=True) as cluster:          # doctest: +SKIP
    ...     result = cluster.run("import os; print(os.environ['TF_CONFIG'])")
    ...     print(result.stdout(1))
    """

    def __init__(self, spec: ClusterSpec | None = None, *, launcher: Launcher | None = None,
                 caps: ClassCaps | None = None, **spec_fields: Any) -> None:
        #: The teacher's caps (config/class_caps.py), read from this process's environment once here
        #: unless given: a bad value is a ConfigError now, before anything starts.
        self.caps = caps if caps is not None else ClassCaps.from_environ(os.environ)
        self._core = AsyncCluster(spec, launcher=launcher, caps=self.caps, **spec_fields)
        self._loop = background_loop()
        self._published = Publication(self)  # the clusters panel's view: mwnotebook/registry/
        _live.add(self)

    @property
    def spec(self) -> ClusterSpec:
        """The options this cluster was made with."""
        return self._core.spec

    @property
    def started(self) -> bool:
        """Whether the cluster has been started (and not stopped since)."""
        return self._core.started

    @property
    def addresses(self) -> list[str]:
        """Each worker's TensorFlow server address, as the launcher placed it ([] before a start)."""
        return self._core.addresses

    @property
    def workers(self) -> tuple[Worker, ...]:
        """The connections to the kernels that run the cell, in cell order (empty when stopped): each
        one's kernel ``handle`` (host, pid, connection info) and ``client``, to look at, not to drive."""
        return self._core.workers

    @property
    def launcher(self) -> Launcher | None:
        """The launcher that placed the workers (a local one's templates, say); None when stopped."""
        return self._core.launcher

    @property
    def network_isolated(self) -> bool:
        """True when the workers' TensorFlow ports are unreachable from other machines."""
        return self._core.network_isolated

    @property
    def late_output(self) -> LateOutput:
        """Output workers send after their cell ended (see mwnotebook/engine/cell/late_output.py)."""
        return self._core.late_output

    @property
    def tf_configs(self) -> list[dict[str, Any]]:
        """Each worker's TF_CONFIG (the same cluster, a different ``task.index``)."""
        return self._core.tf_configs

    @property
    def notebook_notice(self) -> str:
        """With ``coordinator="notebook"``, once started: which addresses listen, unauthenticated, on
        every interface (the servers', and this process's own once it connects); "" otherwise."""
        return self._core.notebook_notice

    @property
    def server_pids(self) -> dict[str, int | None]:
        """A ``--ps`` cluster's worker and ps servers: ``{"ps-0": pid, "worker-0": pid, ...}`` ({} otherwise)."""
        servers = self._core.servers
        return servers.pids() if servers is not None else {}

    @property
    def server_hosts(self) -> dict[str, str]:
        """Where a ``--ps`` cluster's servers run: ``{"ps-0": host, "worker-0": host, ...}`` ({} otherwise)."""
        servers = self._core.servers
        return servers.hosts() if servers is not None else {}

    @property
    def thread_defaults(self) -> dict[str, str]:
        """The thread-pool variables each task gets from ``CPU_LIMIT`` ({} without it, or when remote)."""
        return dict(self._core.thread_defaults)

    def start(self, on_event: EventSink | None = None) -> Cluster:
        """Start every worker (in parallel) and wait until all are ready. Does nothing if running.

        Raises :class:`~mwnotebook.engine.class_caps.CapExceeded` (a ``ConfigError``) before anything
        starts when the teacher's caps (``MWNOTEBOOK_MAX_WORKERS``, ``MEM_LIMIT``) leave no room."""
        claimed = self._admit()
        try:
            self._run_with_events(lambda sink: self._core.start(on_event=sink), on_event, on_interrupt=self._abandon)
        finally:
            if claimed:
                self._core.caps_check.release()
        return self

    def _admit(self) -> bool:
        """Check a start against the caps and claim its tasks until the start ends (False: no new
        claim was needed). The check is the engine's (engine/class_caps.py ``CapsCheck``)."""
        if self.started:
            return False
        own = self._published.cluster_id  # published while restarting after a failed cell: itself
        return self._core.caps_check.claim(exclude=(own,) if own else ())

    def check_caps(self, replacing: Cluster | None = None) -> None:
        """Raise :class:`~mwnotebook.engine.class_caps.CapExceeded` if starting this cluster now would
        pass the teacher's caps; ``replacing``: a running cluster this one replaces (not counted: the
        magic checks before it stops a kernel's cluster of other options). Claims nothing."""
        if self.started:
            return
        other = replacing._published.cluster_id if replacing is not None else None  # noqa: SLF001 - this module's own class
        ids = {self._published.cluster_id, other}
        self._core.caps_check.check(exclude={i for i in ids if i})

    def _abandon(self) -> None:
        """Ctrl-C during a start or restart: end every kernel (waiting for launches under way)."""
        self._loop.run(self._core.kill())
        raise KeyboardInterrupt

    def start_background(self) -> None:
        """Begin starting the workers and return at once; the next ``run`` or ``start`` waits for it.

        A failure is not lost: the next ``run``/``start`` raises it. The clusters panel sees the
        cluster from now on (``starting``), with its workers and pids as soon as they are ready, and
        can stop it (registry/publication.py).
        """
        claimed = self._admit()  # the teacher's caps, before anything starts (see start)
        future = self._loop.submit(self._core.start(on_event=self._published.watch(None)))
        future.add_done_callback(self._published.settled)
        if claimed:
            future.add_done_callback(self._core.caps_check.release)

    def run(self, code: str, on_event: EventSink | None = None, timeout: float | None = None,
            max_restarts: int | None = None) -> RunResult:
        """Run ``code`` on every worker at once; starts the cluster first if needed.

        ``max_restarts`` (default: the spec's, 0): when workers are lost, run the cell again on
        fresh ones up to this many times (see mwnotebook/engine/cell/restarts.py); the result's
        ``restarts`` lists them.

        Ctrl-C (the notebook's stop button) interrupts every worker; a second Ctrl-C kills them.
        Raises :class:`~mwnotebook.errors.ClusterRunError` (a subclass says which fault) on failure.
        """
        limits = CellLimits.of(timeout, max_restarts, self.spec.max_restarts)  # before anything starts
        if not self.started:
            self.start(on_event)
        abort = asyncio.Event()  # bound to the loop on first use; set there, never from this thread
        self._published.cell(code)
        return self._run_with_events(
            lambda sink: self._core.run_within(code, limits, on_event=sink, abort=abort),
            on_event, on_interrupt=lambda: self._loop.call_soon(abort.set))

    def _run_with_events(self, make_coro: Callable[[EventSink | None], Coroutine[Any, Any, _T]],
                         on_event: EventSink | None, on_interrupt: Callable[[], None]) -> _T:
        """Run a core coroutine; hand its events to ``on_event`` in this thread as they come.

        Without ``on_event`` the events stay in the loop thread (the core drops them): this thread
        then wakes only for the end and for Ctrl-C, not twice per worker per cell (each wake-up a
        hand-over of the GIL with the loop thread that reads the workers' replies). With it, each
        wake-up delivers every event already queued.

        The first Ctrl-C calls ``on_interrupt`` (and keeps waiting for the coroutine to wind down);
        a second one kills every worker and re-raises.
        """
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        future = self._loop.submit(make_coro(self._published.watch(events.put if on_event is not None else None)))
        future.add_done_callback(self._published.settled)
        future.add_done_callback(lambda _f: events.put(_DONE))
        interrupts = 0
        with SigintToQueue(events):
            while True:
                try:
                    item = events.get(timeout=0.5)
                except queue.Empty:
                    continue
                except KeyboardInterrupt:  # not the main thread, or someone else's SIGINT handler
                    item = INTERRUPT
                while item is not _DONE and item is not INTERRUPT:
                    _deliver(on_event, item)
                    try:
                        item = events.get_nowait()
                    except queue.Empty:
                        item = _NOTHING
                        break
                if item is _NOTHING:
                    continue
                if item is _DONE:
                    break
                interrupts += 1
                if interrupts == 1:
                    on_interrupt()
                    continue
                interrupt = KeyboardInterrupt()
                self._add_stacks_note(interrupt)
                future.cancel()
                self._loop.run(self._core.kill())
                raise interrupt
        return future.result()

    def interrupt(self) -> None:
        """Interrupt the running cell on every worker (as the notebook's stop button does)."""
        self._loop.run(self._core.interrupt())

    def stacks(self) -> StacksReport:
        """Every worker's current Python stacks, main thread first (also while a cell is blocked)."""
        return self._loop.run(self._core.stacks(), timeout=30)

    def _add_stacks_note(self, error: BaseException) -> None:
        """On a second Ctrl-C, say where each worker was before they are killed."""
        try:
            note = f"{STACKS_HEADING}\n" + self._loop.run(self._core.stacks(), timeout=10).text()
            add_note = getattr(error, "add_note", None)  # Python >= 3.11
            if add_note is not None:
                add_note(note)
        except Exception:  # the kill must go on
            log.debug("no stacks on the second interrupt", exc_info=True)

    def restart(self, on_event: EventSink | None = None) -> list[str]:
        """Replace every worker with a fresh process (same TF_CONFIGs); their variables are lost.
        Tasks of a failed Slurm node move to a spare node first: the lines saying where."""
        return self._run_with_events(lambda sink: self._core.restart(on_event=sink), on_event,
                                     on_interrupt=self._abandon)

    def stop(self) -> None:
        """Shut all workers down and release their ports and files. The cluster can be started again."""
        try:
            self._loop.run(self._core.stop())
        finally:
            self._published.stopped()

    def usage(self) -> list[WorkerUsage]:
        """Every worker's CPU share (% of one core since the previous call) and resident memory, read
        on its own host: psutil here, the remote agent's /proc reading on SSH, Slurm and Ray hosts.
        The clusters panel shows the figures read (registry/publication.py)."""
        usages = self._loop.run(self._core.usage(), timeout=30)
        self._published.usage(usages)
        return usages

    def status(self) -> list[WorkerInfo]:
        """Every task: role, TF_CONFIG task, address, pid, state (cell kernels first, then a --ps cluster's servers)."""
        return self._loop.run(self._core.status())

    def scheduler_status(self) -> dict[str, Any] | None:
        """The batch job the workers run in (Slurm: ``job_id``, ``nodes``, ``state``), or None."""
        return self._loop.run(self._core.scheduler_status())

    def query(self, code: str, timeout: float = 30.0, servers: bool = False) -> list[str | None]:
        """Each worker's stdout from a silent, read-only snippet (None where it failed); ``servers``:
        a --ps cluster's server kernels too, in :meth:`status` order."""
        return self._loop.run(self._core.query(code, timeout, servers))

    def devices(self) -> list[dict[str, Any] | None]:
        """What TensorFlow in each task's kernel sees, in :meth:`status` order (imports TensorFlow
        there; creates no tensor). A --ps cluster's servers are asked too (its parameter servers
        see no GPU by design); None where no kernel answered (or this notebook is the coordinator)."""
        answers = self.query("import json as _j, mwnotebook.worker as _mw\nprint(_j.dumps(_mw.visible_devices()))\n"
                             "del _j, _mw", timeout=120, servers=True)
        return [json.loads(a) if a else None for a in answers]

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.started else "stopped"
        return f"<mwnotebook.Cluster workers={self.spec.workers} {state}>"


def _deliver(sink: EventSink | None, event: Event) -> None:
    if sink is None:
        return
    try:
        sink(event)
    except Exception:  # a broken observer must not break the run
        log.exception("event observer failed on %r", event)


@atexit.register
def _kill_all_at_exit() -> None:
    """Workers never outlive the notebook kernel (they also watch their parent process)."""
    for cluster in list(_live):
        if cluster.started:
            try:
                cluster._loop.run(cluster._core.kill(), timeout=10)  # noqa: SLF001 - this module's own class
            except Exception:  # best effort at exit
                log.debug("could not stop a cluster at exit", exc_info=True)
