"""What the REST API does, without HTTP: list the clusters, look at one, act on one.

Each listing reads every state file of this user (mwnotebook/registry/state.py), sweeps the
orphaned ones (mwnotebook/registry/orphans.py) and adds each worker's CPU and memory: read here for
workers on this machine, the figures the notebook last read and published for the others (SSH, Slurm,
Ray hosts). An action goes to the owning kernel's control socket while the owner lives; with the owner
gone, ``stop`` ends the processes the file names and ``interrupt`` sends them SIGINT; ``restart``
needs the owner.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from mwnotebook.processes.shipped.proc_usage import near
from mwnotebook.registry import control, orphans, processes, state

log = logging.getLogger(__name__)


#: What went wrong -> the HTTP status the API answers with: the one table (handlers.py reads it).
#: The control socket's codes (registry/control.py ``Code``) and ``unreachable`` come from the owner's
#: side; ``not_found`` from here.
STATUS: dict[str, int] = {
    "bad_request": 400,
    "forbidden": 403,
    "not_found": 404,
    "busy": 409,
    "unreachable": 502,
}


def _published_usage(usage: Any, now: float) -> dict[str, Any]:
    """A worker's last published figures, flat, as the panel reads them: ``cpu_percent``,
    ``memory_bytes``, ``memory_limit``, ``near_limit`` and ``usage_age`` (seconds since they were read
    on the worker's host; None: never read). registry/publication.py says when they are read."""
    if not isinstance(usage, dict):
        return {"cpu_percent": None, "memory_bytes": None, "memory_limit": None, "near_limit": False,
                "usage_age": None}
    read_at = usage.get("read_at")
    return {"cpu_percent": usage.get("cpu_percent"), "memory_bytes": usage.get("memory_bytes"),
            "memory_limit": usage.get("memory_limit"), "near_limit": usage.get("near_limit") is True,
            "usage_age": max(0.0, now - read_at) if isinstance(read_at, (int, float)) else None}


class ServiceError(Exception):
    """An action or a look-up that cannot be done; ``code`` is a key of :data:`STATUS`."""

    code = "unreachable"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def status(self) -> int:
        return STATUS.get(self.code, 500)


class NotFound(ServiceError):
    code = "not_found"


class Refused(ServiceError):
    code = "forbidden"


class Conflict(ServiceError):
    code = "busy"


class ClusterService:
    """The clusters of this user in ``directory`` (``<runtime dir>/mwnotebook``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # psutil measures CPU between two calls on the same Process object: one per (pid, start time)
        self._procs: dict[tuple[int, int | None], psutil.Process] = {}

    def clusters(self, notebooks: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Every cluster (orphans swept), newest first; ``notebooks`` maps kernel ids to notebook paths."""
        found = []
        seen: set[tuple[int, int | None]] = set()
        for path, document in state.read_all(self.directory):
            shown = orphans.sweep_one(path, document)
            if shown is not None:
                found.append(self._view(shown, notebooks or {}, seen))
        for key in set(self._procs) - seen:
            del self._procs[key]
        return sorted(found, key=lambda d: -float(d.get("created") or 0))

    def cluster(self, cluster_id: str, notebooks: dict[str, str] | None = None) -> dict[str, Any]:
        path, document = self._read(cluster_id)
        shown = orphans.sweep_one(path, document)
        if shown is None:
            raise NotFound(f"no cluster {cluster_id} (its owner is gone and it was cleaned up)")
        return self._view(shown, notebooks or {}, set())

    def act(self, cluster_id: str, action: str) -> str:
        """Do ``action`` on the cluster; returns who did it (``owner`` or ``server``)."""
        path, document = self._read(cluster_id)
        if orphans.owner_alive(document):
            socket = document.get("control")
            if not socket or Path(socket).parent != self.directory:
                raise Refused(f"cluster {cluster_id} names no control socket in {self.directory}")
            try:
                control.send(socket, action)
            except control.ControlError as e:
                raise ServiceError(str(e), e.code) from e
            return "owner"
        if action not in control.ACTIONS:
            raise ServiceError(f"unknown action {action!r}; one of {', '.join(control.ACTIONS)}", "bad_request")
        if action == "restart":
            raise Conflict(f"the kernel that owned cluster {cluster_id} is gone: it can only be stopped")
        if action == "interrupt":  # only tasks marked local with their start time (orphans.local_processes)
            for pid, started in orphans.local_processes(document):
                if processes.is_running(pid, started):
                    os.kill(pid, signal.SIGINT)
            return "server"
        orphans.end_processes(document)
        state.remove(path)
        control_path = document.get("control")
        if control_path and Path(control_path).parent == self.directory:
            state.remove(Path(control_path))
        return "server"

    def _read(self, cluster_id: str) -> tuple[Path, dict[str, Any]]:
        if not state.valid_id(cluster_id):
            raise NotFound(f"not a cluster id: {cluster_id!r}")
        path = state.state_path(self.directory, cluster_id)
        try:
            document = state.read_state(path)
        except state.NotYours as e:
            raise Refused(str(e)) from e
        if document is None:
            raise NotFound(f"no cluster {cluster_id}")
        return path, document

    def _view(self, document: dict[str, Any], notebooks: dict[str, str],
              seen: set[tuple[int, int | None]]) -> dict[str, Any]:
        """The document as the panel shows it: the notebook's path, uptime, each worker's CPU and memory
        (:func:`_published_usage`; read here, now, for a worker on this machine)."""
        owner = document.get("owner") or {}
        kernel = owner.get("kernel_id")
        view = {key: value for key, value in document.items() if key != "control"}
        view["notebook"] = notebooks.get(kernel or "") or owner.get("session_name")
        view["uptime"] = max(0.0, time.time() - float(document.get("created") or time.time()))
        workers = []
        now = time.time()
        for worker in document.get("workers") or []:
            worker = {**worker, **_published_usage(worker.get("usage"), now)}
            if worker.get("local") and isinstance(worker.get("pid"), int):
                key = (worker["pid"], worker.get("pid_start"))
                seen.add(key)
                if processes.is_running(*key):
                    try:
                        proc = self._procs.get(key) or self._procs.setdefault(key, psutil.Process(key[0]))
                        with proc.oneshot():
                            worker["cpu_percent"] = proc.cpu_percent(None)
                            worker["memory_bytes"] = proc.memory_info().rss
                        worker["usage_age"] = 0.0
                        worker["near_limit"] = worker["near_limit"] or near(worker["memory_bytes"],
                                                                            worker["memory_limit"])
                    except psutil.Error:
                        pass
            workers.append(worker)
        view["workers"] = workers
        return view
