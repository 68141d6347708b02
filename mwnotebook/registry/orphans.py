"""A state file whose owner is gone: shown as ``orphaned`` for a moment, its processes ended, then removed.

Workers already die with their parent (local kernels watch it; remote agents end with their
channel), so this is the second line, and a second line must never hit the wrong target:

- a task is killed (process group first) only when the file marks it ``local`` (its kernel handle
  said its process is on this machine) and its pid still has the start time recorded with it
  (registry/document.py ``signalable``); a remote task (SSH, Slurm, Ray) is never signalled from
  here, whatever local process has its pid number now: its own engine ends it (its agent's channel
  closes, Slurm cancels its job, Ray ends the dead driver's actors);
- a Slurm allocation is cancelled (``scancel``, on the login node where the cluster used one) only
  when its launcher said it made it (``scheduler.owned``): one the user gave (``--slurm-job``, or
  ``SLURM_JOB_ID`` inside ``salloc``) is never cancelled.

The file stays ``linger`` seconds with ``orphaned_at`` set, so a panel polling it can say what
happened, then it is removed with its socket. Who sweeps: the Jupyter server on each listing
(server/service.py), and a kernel once when mwnotebook's extension loads (:func:`sweep_once`); a
cluster's own writer thread never does.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from mwnotebook.registry import processes
from mwnotebook.registry.document import signalable
from mwnotebook.registry.state import read_all, registry_dir, remove, write_state

log = logging.getLogger(__name__)

#: How long an orphaned cluster stays listed (with state ``orphaned``) before its file is removed.
ORPHAN_LINGER = 3.0


def owner_alive(document: dict[str, Any]) -> bool:
    """Whether the kernel that published the document still runs. Without its start time the owner
    counts as alive while any process has its pid: the sweep never acts on a guess."""
    owner = document.get("owner") or {}
    pid, started = owner.get("pid"), owner.get("start_time")
    if started is None:
        return isinstance(pid, int) and pid > 0 and processes.start_time(pid) is not None
    return processes.is_running(pid, started)


def local_processes(document: dict[str, Any]) -> list[tuple[int, int]]:
    """``(pid, start time)`` of every task the document marks as a process of this machine with its
    start time recorded: the only processes anything here may signal."""
    found = []
    for worker in document.get("workers") or []:
        if isinstance(worker, dict) and (target := signalable(worker)) is not None:
            found.append(target)
    return found


def running_processes(document: dict[str, Any]) -> list[int]:
    return [pid for pid, started in local_processes(document) if processes.is_running(pid, started)]


def end_processes(document: dict[str, Any]) -> list[str]:
    """Kill what the document names that still runs; what was done, one line each."""
    done = [f"killed pid {pid}" for pid, started in local_processes(document) if processes.kill(pid, started)]
    scheduler = document.get("scheduler") or {}
    job = scheduler.get("job_id")
    if job and scheduler.get("owned") is True:
        command = ["scancel", str(job)]
        login = scheduler.get("login")
        if login:
            command = ["ssh", "-o", "BatchMode=yes", str(login), shlex.join(command)]
        try:
            subprocess.run(command, capture_output=True, timeout=15, check=False)
            done.append(f"cancelled Slurm job {job}")
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("could not cancel Slurm job %s of an orphaned cluster: %s", job, e)
    return done


def sweep_one(path: Path, document: dict[str, Any], now: float | None = None,
              linger: float = ORPHAN_LINGER) -> dict[str, Any] | None:
    """Handle one state document whose owner may be gone.

    Returns the document to show (``state`` ``orphaned`` while it lingers), or None once the file
    is removed. A document whose owner lives is returned as it is."""
    if owner_alive(document):
        return document
    now = time.time() if now is None else now
    since = document.get("orphaned_at")
    if since is None:
        document = {**document, "state": "orphaned", "orphaned_at": now}
        document["cleanup"] = end_processes(document)
        try:
            write_state(path, document)
        except OSError as e:
            log.debug("could not mark %s orphaned: %s", path, e)
        return document
    if now - float(since) < linger or running_processes(document):
        if running_processes(document):
            end_processes(document)
        return {**document, "state": "orphaned"}
    remove(path)
    control = document.get("control")
    if control and os.path.dirname(control) == str(path.parent):
        remove(Path(control))
    return None


def sweep_directory(directory: Path) -> None:
    """Sweep every state file of this user in ``directory`` once (each owner checked; the live left alone)."""
    for path, document in list(read_all(directory)):
        try:
            sweep_one(path, document)
        except Exception:  # one bad file must not stop the others
            log.debug("sweeping %s failed", path, exc_info=True)


_swept = threading.Event()


def sweep_once(directory: Path | None = None) -> bool:
    """Sweep the registry once per process, on a short-lived thread of its own (the caller, a kernel
    loading mwnotebook's extension, never waits for ``scancel``). False when this process swept before."""
    if _swept.is_set():
        return False
    _swept.set()

    def sweep() -> None:
        try:
            sweep_directory(directory if directory is not None else registry_dir())
        except Exception:
            log.debug("sweeping stale state files failed", exc_info=True)

    threading.Thread(target=sweep, name="mwnotebook-registry-sweep", daemon=True).start()
    return True
