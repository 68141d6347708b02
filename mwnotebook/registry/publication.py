"""The one collaborator the engine's blocking ``Cluster`` facade holds for the clusters panel.

While the cluster runs, :class:`Publication` keeps its state file current (mwnotebook/registry/state.py)
and serves its control socket (mwnotebook/registry/control.py). The facade tells it four things:
an operation begins (:meth:`watch`, which also wraps the operation's event sink), which cell runs
(:meth:`cell`), an operation ended (:meth:`settled`) and the cluster stopped (:meth:`stopped`).

Cost to the cell: the wrapped sink runs on the engine's loop thread and only records states and
error lines (an output chunk costs one ``isinstance`` check); the file is written on the
publication's own thread, at most twice a second, and pids and hosts are asked of the cluster only
after an operation ends or workers were replaced. Any failure here is logged, never raised into
the engine.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from mwnotebook.registry import control, orphans, state
from mwnotebook.registry.owner import this_owner
from mwnotebook.registry.processes import start_time
from mwnotebook.shared.events import Event, EventSink, RunRestarted, WorkerOutput, WorkerStateChanged

log = logging.getLogger(__name__)

#: Seconds between two writes of a state file at most (updates in between are coalesced).
WRITE_INTERVAL = 0.5
#: How long a stop or restart from the panel waits for a running cell to end after interrupting it.
CELL_END_WAIT = 20.0
_CELL_TEXT = 200
_ERROR_TEXT = 300
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "this notebook", socket.gethostname()})
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


class Publishable(Protocol):
    """What a publication needs of its cluster: the blocking facade's public, thread-safe methods."""

    @property
    def spec(self) -> Any: ...
    @property
    def started(self) -> bool: ...
    def status(self) -> Sequence[StatusEntry]: ...
    def scheduler_status(self) -> dict[str, Any] | None: ...
    def interrupt(self) -> None: ...
    def restart(self) -> object: ...
    def stop(self) -> None: ...


def engine_of(spec: Any) -> str:
    if getattr(spec, "slurm", None) or getattr(spec, "slurm_job", None):
        return "slurm"
    return "ssh" if getattr(spec, "hosts", ()) else "local"


def spec_summary(spec: Any) -> dict[str, Any]:
    fields = ("workers", "ps", "chief", "evaluator", "coordinator", "cpu", "gpus_per_worker", "hosts",
              "workers_per_host", "network", "max_restarts", "slurm", "slurm_job", "mixed_precision", "xla")
    summary = {}
    for name in fields:
        value = getattr(spec, name, None)
        if value not in (None, False, (), "", 0) or name == "workers":
            summary[name] = list(value) if isinstance(value, tuple) else value
    return summary


def first_lines(code: str, limit: int = _CELL_TEXT) -> str:
    text = "\n".join(line for line in code.strip().splitlines()[:3])
    return text if len(text) <= limit else text[:limit - 1] + "…"


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
        self._file_lock = threading.Lock()
        self._id: str | None = None
        self._path: Path | None = None
        self._listener: control.ControlListener | None = None
        self._writer: threading.Thread | None = None
        self._owner: dict[str, Any] = {}
        self._generation = 0
        self._reset()

    def _reset(self) -> None:
        self._created = 0.0
        self._phase = "starting"
        self._pending_cell: str | None = None
        self._cell: dict[str, Any] | None = None
        self._last_cell: dict[str, Any] | None = None
        self._restarts = 0
        self._last_error = ""
        self._entries: list[dict[str, Any]] = []
        self._event_states: dict[int, str] = {}
        self._worker_errors: dict[int, str] = {}
        self._scheduler: dict[str, Any] | None = None
        self._dirty = False
        self._need_status = False
        self._closed = False
        self._action: str | None = None
        self._restarting = False  # in the background, after a failed cell
        self._last_write = 0.0
        self._generation += 1  # a writer of an earlier run ends

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
        return self._owner.get("pid") if self._path is not None else None

    # -- what the facade calls -------------------------------------------------------------------

    def cell(self, code: str) -> None:
        """The next operation runs this cell."""
        self._pending_cell = code

    def watch(self, forward: EventSink | None) -> EventSink | None:
        """An operation (start, cell, restart) begins; returns its event sink (``forward`` wrapped)."""
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
        is unpublished."""
        if self._path is None:
            return
        error = outcome.exception() if outcome is not None and not outcome.cancelled() else None
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
            self._mark()

    def stopped(self) -> None:
        """The cluster stopped: the file and the socket go."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._file_lock:
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
                self._listener = control.ControlListener(state.socket_path(directory, self._id), self._accept)
                self._writer = threading.Thread(target=self._write_loop, args=(directory, self._generation),
                                                name=f"mwnotebook-registry-{self._id}", daemon=True)
                self._writer.start()
                _live.add(self)
            code, self._pending_cell = self._pending_cell, None
            if code is not None:
                self._phase = "running"
                self._cell = {"text": first_lines(code), "since": time.time()}
                self._event_states.clear()
            elif self._phase != "stopping":
                self._phase = "restarting" if self._entries else "starting"
            self._mark(now=True)

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
            self._mark()

    def _mark(self, now: bool = False) -> None:
        """Something changed (under ``_lock``): the writer writes within ``interval`` (``now``: at once)."""
        self._dirty = True
        if now:
            self._last_write = 0.0
        self._lock.notify_all()

    def document(self) -> dict[str, Any]:
        """The state document as it is now (under ``_lock``)."""
        workers = []
        for entry in self._entries:
            index = entry["index"]
            worker = {**entry}
            if entry.get("runs_cell") and index in self._event_states:
                worker["state"] = self._event_states[index]
            worker["last_error"] = self._worker_errors.get(index, "")
            workers.append(worker)
        spec = self._cluster.spec
        hosts = sorted({w["host"] for w in workers if w.get("host")}) or list(getattr(spec, "hosts", ()))
        return {
            "version": state.VERSION, "id": self._id, "created": self._created, "updated": time.time(),
            "owner": self._owner,
            "control": str(self._listener.path) if self._listener is not None else None,
            "engine": engine_of(spec), "hosts": hosts, "spec": spec_summary(spec), "state": self._phase,
            "cell": self._cell, "last_cell": self._last_cell, "restarts": self._restarts,
            "last_error": self._last_error, "scheduler": self._scheduler, "workers": workers,
        }

    def _refresh_status(self) -> None:
        """Ask the cluster for every task's pid, host and TF_CONFIG (on the writer thread)."""
        engine = engine_of(self._cluster.spec)
        entries = []
        for info in self._cluster.status():
            local = engine == "local" or info.host in _LOCAL_HOSTS
            entries.append({
                "index": info.index, "role": info.role, "task": info.task, "host": info.host, "pid": info.pid,
                "pid_start": start_time(info.pid) if local and info.pid else None, "local": local,
                "state": info.state, "alive": info.alive, "tf_config": info.tf_config, "address": info.address,
                "runs_cell": info.runs_cell, "restarts": info.restarts})
        scheduler = None
        if engine == "slurm":
            job = self._cluster.scheduler_status() or {}
            spec = self._cluster.spec
            scheduler = {**job, "owned": not getattr(spec, "slurm_job", None),
                         "login": getattr(spec, "slurm_login", None)}
        with self._lock:
            self._entries = entries
            self._scheduler = scheduler
            if self._phase == "idle":
                self._event_states.clear()

    def _write_loop(self, directory: Path, generation: int) -> None:
        try:
            for path, document in list(state.read_all(directory)):  # stale files of dead owners
                orphans.sweep_one(path, document)
        except Exception:
            log.debug("sweeping stale state files failed", exc_info=True)
        while True:
            with self._lock:
                while not self._dirty and not self._closed and self._generation == generation:
                    self._lock.wait(self._interval if self._restarting else None)
                    if self._restarting and self._cluster.started:  # the fresh workers are up
                        self._restarting = False
                        if self._phase == "restarting":
                            self._phase = "idle"
                        self._need_status = True
                        self._dirty = True
                if self._closed or self._generation != generation:
                    return
                delay = self._last_write + self._interval - time.monotonic()
                if delay > 0:
                    self._lock.wait(delay)  # coalesce; a `now` mark resets _last_write and wakes us
                    continue
                need_status, self._need_status = self._need_status, False
                self._dirty = False
            if need_status:
                try:
                    self._refresh_status()
                except Exception:
                    log.debug("cluster status for the panel failed", exc_info=True)
            with self._lock:
                document = self.document()
            with self._file_lock:
                if self._path is None or self._closed or self._generation != generation:
                    return
                try:
                    state.write_state(self._path, document)
                except OSError:
                    log.warning("could not write %s", self._path, exc_info=True)
            self._last_write = time.monotonic()

    # -- the control channel --------------------------------------------------------------------------

    def _accept(self, action: str) -> str | None:
        with self._lock:
            if self._action is not None and action != "interrupt":
                return f"a {self._action} from the panel is under way"
            if action != "interrupt":
                self._action = action
        threading.Thread(target=self._do, args=(action,), name=f"mwnotebook-{action}", daemon=True).start()
        return None

    def _do(self, action: str) -> None:
        try:
            if action == "interrupt":
                self._cluster.interrupt()
                return
            with self._lock:
                running = self._phase == "running"
                if action == "stop":
                    self._phase = "stopping"
                self._mark(now=True)
            if running:
                self._cluster.interrupt()
                deadline = time.monotonic() + CELL_END_WAIT
                with self._lock:
                    while self._cell is not None and not self._closed and time.monotonic() < deadline:
                        self._lock.wait(0.2)
            if action == "restart":
                self._cluster.restart()
            else:
                self._cluster.stop()
        except Exception as e:
            log.warning("%s from the clusters panel failed", action, exc_info=True)
            with self._lock:
                self._last_error = f"{action} from the panel failed: {e}"[:_ERROR_TEXT]
                self._mark()
        finally:
            with self._lock:
                if action != "interrupt":
                    self._action = None


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
