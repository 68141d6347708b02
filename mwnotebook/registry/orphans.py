"""A state file whose owner is gone: shown as ``orphaned`` for a moment, its processes ended, then removed.

Workers already die with their parent (local kernels watch it; remote agents end with their SSH
channel), so this is the second line: any local process the file names that still runs is killed
(process group first), and a Slurm allocation the cluster made itself is cancelled (``scancel``,
on the login node where the cluster used one). A job the user gave (``--slurm-job``) is left alone.
The file stays ``linger`` seconds with ``orphaned_at`` set, so a panel polling it can say what
happened, then it is removed with its socket.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

from mwnotebook.registry import processes
from mwnotebook.registry.state import remove, write_state

log = logging.getLogger(__name__)

#: How long an orphaned cluster stays listed (with state ``orphaned``) before its file is removed.
ORPHAN_LINGER = 3.0


def owner_alive(document: dict[str, Any]) -> bool:
    owner = document.get("owner") or {}
    return processes.is_running(owner.get("pid"), owner.get("start_time"))


def local_processes(document: dict[str, Any]) -> list[tuple[int, int | None]]:
    """``(pid, start time)`` of every process of this machine the document names."""
    found = []
    for worker in document.get("workers") or []:
        if worker.get("local") and isinstance(worker.get("pid"), int):
            found.append((worker["pid"], worker.get("pid_start")))
    return found


def running_processes(document: dict[str, Any]) -> list[int]:
    return [pid for pid, started in local_processes(document) if processes.is_running(pid, started)]


def end_processes(document: dict[str, Any]) -> list[str]:
    """Kill what the document names that still runs; what was done, one line each."""
    done = [f"killed pid {pid}" for pid, started in local_processes(document) if processes.kill(pid, started)]
    scheduler = document.get("scheduler") or {}
    job = scheduler.get("job_id")
    if job and scheduler.get("owned"):
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
