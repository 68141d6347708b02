"""Local processes named in a state file: are they still the ones the file means, and ending them.

A pid alone can be reused after its process ended, so every pid is kept with its start time (the
22nd field of ``/proc/<pid>/stat``, in clock ticks since boot): a pid whose start time differs is
another process and is never signalled, and a pid without a recorded start time (a remote task's,
or one read too late) is never taken for a running process of ours.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields after the last ")"
    fields = stat[stat.rindex(b")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def is_running(pid: int | None, started: int | None) -> bool:
    """True while ``pid`` is the process that started at ``started`` and has not become a zombie.

    ``started`` None is never a match: without a start time the pid may be anyone's."""
    if pid is None or pid <= 0 or started is None:
        return False
    now = start_time(pid)
    if now is None or now != started:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:].split()[0] != b"Z"
    except (OSError, IndexError, ValueError):
        return False


def kill(pid: int, started: int | None) -> bool:
    """SIGKILL the process (and its process group when it leads one that is not ours); True if signalled."""
    if not is_running(pid, started) or pid == os.getpid():
        return False
    try:
        group = os.getpgid(pid)
        if group == pid and group != os.getpgrp():
            os.killpg(group, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        log.warning("not allowed to end process %d", pid)
        return False
