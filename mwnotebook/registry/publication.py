"""The one collaborator the engine's blocking ``Cluster`` facade holds for the clusters panel: the lifecycle glue.

While the cluster runs, :class:`Publication` keeps its state file current and serves its control
socket. The facade tells it four things: an operation begins (:meth:`watch`, which also wraps the
operation's event sink; a start in the background too), which cell runs (:meth:`cell`), an
operation ended (:meth:`settled`) and the cluster stopped (:meth:`stopped`). The parts it glues:
the document's shape (registry/document.py), the writer thread (registry/writer.py), the control
socket (registry/control.py) and the panel's actions (registry/actions.py).

What the document says of each task is what the cluster's launcher stated: whether the task's
process is on this machine (``WorkerInfo.on_this_machine``, from its kernel handle) and whether the
launcher owns its Slurm allocation (``owned`` in its job status); the backend is the spec's
(``ClusterSpec.backend``). Nothing here guesses them. It never sweeps other kernels' files
(registry/orphans.py ``sweep_once``, when the extension loads, and the server do).

Each cell kernel's CPU and memory are the figures the notebook's side reads anyway (engine/usage.py):
the status table's poll, every 2 s while a cell runs (its ``WorkerResources`` events), and each
``Cluster.usage()`` (``%mwcluster status``); the document keeps the last ones with the time they were
read. There is no reading for the panel alone: between cells the figures are those of the last one.

Cost to the cell: the wrapped sink runs on the engine's loop thread and only records states, error
lines and usage figures (an output chunk costs one ``isinstance`` check); the file is written on the writer's
own thread, at most twice a second, and pids and hosts are asked of the cluster only after an
operation ends or workers were replaced. Any failure here is logged, never raised into the engine.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from mwnotebook.registry import control, state
from mwnotebook.registry.actions import CELL_END_WAIT, PanelActions
from mwnotebook.registry.document import (
    CellText,
    ClusterDocument,
    Owner,
    Phase,
    Scheduler,
    Task,
    TaskUsage,
    first_lines,
    spec_summary,
)
from mwnotebook.registry.owner import this_owner
from mwnotebook.registry.processes import start_time
from mwnotebook.registry.writer import StateWriter
from mwnotebook.shared.events import (
    Event,
    EventSink,
    RunRestarted,
    WorkerOutput,
    WorkerResources,
    WorkerStateChanged,
)

__all__ = ["CELL_END_WAIT", "WRITE_INTERVAL", "Publication", "first_lines", "spec_summary"]

log = logging.getLogger(__name__)

#: Seconds between two writes of a state file at most (updates in between are coalesced).
WRITE_INTERVAL = 0.5
_ERROR_TEXT = 300
_live: weakref.WeakSet[Publication] = weakref.WeakSet()


class StatusEntry(Protocol):
    """One task as ``Cluster.status()`` reports it (engine/cluster_status.py ``WorkerInfo``)."""

    @property
    def index(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def state(self) -> str: ...
    @property
    def alive(self) -> bool: ...
    @property
    def tf_config(self) -> dict[str, Any]: ...
    @property
    def role(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def runs_cell(self) -> bool: ...
    @property
    def restarts(self) -> int: ...
    @property
    def on_this_machine(self) -> bool: ...


class UsageEntry(Protocol):
    """One cell kernel's CPU and memory as ``Cluster.usage()`` reads them (engine/usage.py ``WorkerUsage``)."""

    @property
    def index(self) -> int: ...
    @property
    def cpu_percent(self) -> float | None: ...
    @property
    def memory_bytes(self) -> int | None: ...
    @property
    def memory_limit(self) -> int | None: ...
    @property
    def near_limit(self) -> bool: ...


class Publishable(Protocol):
    """What a publication needs of its cluster: the blocking facade's public, thread-safe methods.
    ``spec.backend`` is read (config/spec.py ``ClusterSpec.backend``)."""

    @property
    def spec(self) -> Any: ...
    @property
    def started(self) -> bool: ...
    def status(self) -> Sequence[StatusEntry]: ...
    def scheduler_status(self) -> dict[str, Any] | None: ...
    def interrupt(self) -> None: ...
    def restart(self) -> object: ...
    def stop(self) -> None: ...


def task_entry(info: StatusEntry) -> Task:
    """A task as the document lists it: ``local`` as its handle said; a start time for local pids only."""
    local = info.on_this_machine is True
    return {"index": info.index, "role": info.role, "task": info.task, "host": info.host, "pid": info.pid,
            "pid_start": start_time(info.pid) if local and info.pid else None, "local": local,
            "state": info.state, "alive": info.alive, "tf_config": info.tf_config, "address": info.address,
            "runs_cell": info.runs_cell, "restarts": info.restarts, "last_error": "", "usage": None}


def usage_entry(u: UsageEntry | WorkerResources) -> TaskUsage:
    """A kernel's figures as the document keeps them, read now."""
    return {"cpu_percent": u.cpu_percent, "memory_bytes": u.memory_bytes, "memory_limit": u.memory_limit,
            "near_limit": bool(u.near_limit), "read_at": time.time()}


def scheduler_entry(job: dict[str, Any] | None) -> Scheduler:
    """The job section as the launcher reported it (``owned`` only when it said True)."""
    job = job or {}
    return {"job_id": job.get("job_id"), "nodes": list(job.get("nodes") or []), "state": str(job.get("state", "")),
            "owned": job.get("owned") is True, "login": job.get("login")}


class Publication:
    """The state file and control socket of one cluster, while it runs.

    ``directory`` (default: the Jupyter runtime directory's ``mwnotebook``) and ``enabled``
    (default: unless ``MWNOTEBOOK_REGISTRY=0``) are decided here once."""

    def __init__(self, cluster: Publishable, directory: Path | None = None, enabled: bool | None = None,
                 interval: float = WRITE_INTERVAL) -> None:
        self._cluster = cluster
        self._enabled = os.environ.get("MWNOTEBOOK_REGISTRY", "1") != "0" if enabled is None else enabled
        self._directory = directory
        self._interval = interval
        self._lock = threading.Condition()
        self._id: str | None = None
        self._path: Path | None = None
        self._listener: control.ControlListener | None = None
        self._writer: StateWriter | None = None
        self._actions = PanelActions(cluster, self)
        self._owner: Owner | None = None
        self._reset()

    def _reset(self) -> None:
        self._created = 0.0
        self._phase: Phase = "starting"
        self._pending_cell: str | None = None
        self._cell: CellText | None = None
        self._last_cell: CellText | None = None
        self._restarts = 0
        self._last_error = ""
        self._entries: list[Task] = []
        self._event_states: dict[int, str] = {}
        self._worker_errors: dict[int, str] = {}
        self._usage: dict[int, TaskUsage] = {}  # by cell kernel index: the last figures read
        self._scheduler: Scheduler | None = None
        self._need_status = False
        self._closed = False
        self._restarting = False  # in the background, after a failed cell

    @property
    def path(self) -> Path | None:
        """The state file while the cluster is published, else None."""
        return self._path

    @property
    def cluster_id(self) -> str | None:
        return self._id

    @property
    def owner_pid(self) -> int | None:
        """The process that published the file (a forked child inherits the object, not the file)."""
        return self._owner["pid"] if self._path is not None and self._owner is not None else None

    # -- what the facade calls -------------------------------------------------------------------

    def cell(self, code: str) -> None:
        """The next operation runs this cell."""
        self._pending_cell = code

    def watch(self, forward: EventSink | None) -> EventSink | None:
        """An operation (start, background start, cell, restart) begins; returns its event sink
        (``forward`` wrapped). The cluster is published from here on."""
        if not self._enabled:
            return forward
        try:
            self._begin()
        except Exception:
            log.warning("the clusters panel will not see this cluster", exc_info=True)
            return forward

        def sink(event: Event) -> None:
            if not isinstance(event, WorkerOutput) or event.msg_type == "error":
                self._note(event)
            if forward is not None:
                forward(event)
        return sink

    def settled(self, outcome: concurrent.futures.Future[Any] | None = None) -> None:
        """The operation ended (done, failed or interrupted); ``outcome`` is its future.

        A cell whose error says the workers are being restarted (``restarted``) leaves the cluster
        restarting in the background: it stays published, and the writer watches for the fresh
        workers. Otherwise a cluster that is not started (a start that failed or was interrupted)
        is unpublished. The workers' pids are written within one write interval."""
        if self._path is None:
            return
        error = None
        if outcome is not None and not outcome.cancelled():
            error = outcome.exception()
        restarting = bool(getattr(error, "restarted", False))
        try:
            started = self._cluster.started
        except Exception:
            started = False
        if not started and not restarting:
            self.stopped()
            return
        with self._lock:
            if self._cell is not None:
                self._last_cell = {**self._cell, "ended": time.time()}
            self._cell = None
            if self._phase != "stopping":
                self._phase = "idle" if started else "restarting"
            self._restarting = not started
            self._need_status = True
            self._lock.notify_all()
        self._changed(now=True)
        if self._writer is not None:
            self._writer.watching(not started)

    def stopped(self) -> None:
        """The cluster stopped: the file and the socket go."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if self._path is not None:
            state.remove(self._path)
        self._path = None
        self._id = None
        _live.discard(self)

    # -- the state --------------------------------------------------------------------------------

    def _begin(self) -> None:
        with self._lock:
            if self._path is None:
                self._reset()
                directory = self._directory or state.registry_dir()
                state.ensure_dir(directory)
                self._id = state.new_id()
                self._path = state.state_path(directory, self._id)
                self._created = time.time()
                self._owner = this_owner()
                self._listener = control.ControlListener(state.socket_path(directory, self._id),
                                                         self._actions.accept)
                self._writer = StateWriter(self._path, self._render, self._interval,
                                           f"mwnotebook-registry-{self._id}", watch=self._check_restarted)
                _live.add(self)
            code, self._pending_cell = self._pending_cell, None
            if code is not None:
                self._phase = "running"
                self._cell = {"text": first_lines(code), "since": time.time()}
                self._event_states.clear()
            elif self._phase != "stopping":
                self._phase = "restarting" if self._entries else "starting"
        self._changed(now=True)

    def _changed(self, now: bool = False) -> None:
        writer = self._writer
        if writer is not None:
            writer.mark(now)

    def _note(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, WorkerStateChanged):
                self._event_states[event.worker] = event.state
                if event.error:
                    self._worker_errors.setdefault(event.worker, event.error)
            elif isinstance(event, WorkerOutput):
                content = event.content
                line = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}"[:_ERROR_TEXT]
                self._worker_errors[event.worker] = line
                self._last_error = f"[{event.worker}] {line}"
            elif isinstance(event, RunRestarted):
                self._restarts += 1
                self._need_status = True
                self._usage.clear()  # the figures were the lost workers'
            elif isinstance(event, WorkerResources):  # the status table's poll while a cell runs
                self._usage[event.worker] = usage_entry(event)
        self._changed()

    def usage(self, usages: Sequence[UsageEntry]) -> None:
        """The figures ``Cluster.usage()`` just read (``%mwcluster status``): the panel shows them
        until the next reading (no reading of its own)."""
        if self._path is None:
            return
        with self._lock:
            for u in usages:
                self._usage[u.index] = usage_entry(u)
        self._changed()

    def _check_restarted(self) -> bool:
        """The writer's watch while restarting in the background: True once the fresh workers are up."""
        with self._lock:
            if not self._restarting or not self._cluster.started:
                return False
            self._restarting = False
            if self._phase == "restarting":
                self._phase = "idle"
            self._need_status = True
        if self._writer is not None:
            self._writer.watching(False)
        return True

    def document(self) -> ClusterDocument:
        """The state document as it is now (under ``_lock``)."""
        workers: list[Task] = []
        for entry in self._entries:
            index = entry["index"]
            worker: Task = {**entry}
            if entry.get("runs_cell") and index in self._event_states:
                worker["state"] = self._event_states[index]
            worker["last_error"] = self._worker_errors.get(index, "")
            worker["usage"] = self._usage.get(index) if entry.get("runs_cell") else None
            workers.append(worker)
        spec = self._cluster.spec
        hosts = sorted({w["host"] for w in workers if w.get("host")}) or list(getattr(spec, "hosts", ()))
        document: ClusterDocument = {
            "version": state.VERSION, "id": self._id or "", "created": self._created, "updated": time.time(),
            "control": str(self._listener.path) if self._listener is not None else None,
            "engine": spec.backend, "hosts": hosts, "spec": spec_summary(spec), "state": self._phase,
            "cell": self._cell, "last_cell": self._last_cell, "restarts": self._restarts,
            "last_error": self._last_error, "scheduler": self._scheduler, "workers": workers,
        }
        if self._owner is not None:
            document["owner"] = self._owner
        return document

    def _refresh_status(self) -> None:
        """Ask the cluster for every task's pid, host and TF_CONFIG, and for its job (on the writer thread)."""
        entries = [task_entry(info) for info in self._cluster.status()]
        scheduler = scheduler_entry(self._cluster.scheduler_status()) if self._cluster.spec.backend == "slurm" else None
        with self._lock:
            self._entries = entries
            self._scheduler = scheduler
            if self._phase == "idle":
                self._event_states.clear()

    def _render(self) -> dict[str, Any]:
        """The document to write (the writer's thread): the status first when it is due."""
        with self._lock:
            need_status, self._need_status = self._need_status, False
        if need_status:
            try:
                self._refresh_status()
            except Exception:
                log.debug("cluster status for the panel failed", exc_info=True)
        with self._lock:
            return dict(self.document())

    # -- what the panel's actions tell (registry/actions.py ActionView) ----------------------------

    def action_begins(self, action: str) -> bool:
        with self._lock:
            running = self._phase == "running"
            if action == "stop":
                self._phase = "stopping"
        self._changed(now=True)
        return running

    def wait_cell_end(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._cell is not None and not self._closed and time.monotonic() < deadline:
                self._lock.wait(0.2)

    def action_failed(self, action: str, error: BaseException) -> None:
        with self._lock:
            self._last_error = f"{action} from the panel failed: {error}"[:_ERROR_TEXT]
        self._changed()


@atexit.register
def _remove_at_exit() -> None:
    """A kernel that ends normally leaves no state file (a killed one's is swept: orphans.py)."""
    for publication in list(_live):
        if publication.owner_pid != os.getpid():  # a forked child exiting: the file is its parent's
            continue
        try:
            publication.stopped()
        except Exception:
            pass
