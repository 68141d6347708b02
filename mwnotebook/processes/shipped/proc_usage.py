"""A process's CPU time, resident memory and memory limit, from /proc and /sys/fs/cgroup (stdlib
only: used by the remote agent on a worker's host, remote_agent.py ``usage``, and by
``mwnotebook/engine/usage.py`` for workers on the notebook's machine)."""

from __future__ import annotations

import os

#: cgroup v1 writes "no limit" as a huge number (a page-rounded 2**63 - 1); anything above the
#: machine's memory is no limit either.
_NO_LIMIT = 2 ** 60


def proc_usage(pid: int) -> tuple[float, int, float]:
    """``(CPU seconds used, resident bytes, seconds since it started)``: ``/proc/PID/stat`` fields
    14-15 (utime, stime) and 22 (start time), in clock ticks; ``statm``'s resident pages (what
    psutil's ``memory_info().rss`` reads)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    with open("/proc/uptime", "rb") as f:
        age = float(f.read().split()[0]) - int(fields[19]) / ticks
    with open(f"/proc/{pid}/statm", "rb") as f:
        resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, resident, age


def _read_number(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) < _NO_LIMIT else None


def memory_limit(pid: int, root: str = "/") -> int | None:
    """The smallest memory limit the process lives under: the machine's memory (``MemTotal``) and
    every limit of its memory cgroup and the cgroup's ancestors (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``). None when not even MemTotal can be read. ``root``: for tests."""
    limits: list[int] = []
    try:
        with open(os.path.join(root, "proc/meminfo")) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    limits.append(int(line.split()[1]) * 1024)
        with open(os.path.join(root, f"proc/{pid}/cgroup")) as f:
            entries = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
    except (OSError, ValueError):
        return min(limits) if limits else None
    for _id, controllers, path in entries:
        if controllers == "":
            base, name = os.path.join(root, "sys/fs/cgroup"), "memory.max"
        elif "memory" in controllers.split(","):
            base, name = os.path.join(root, "sys/fs/cgroup/memory"), "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):  # the cgroup, then each ancestor
            limit = _read_number(os.path.join(base, *parts[:depth], name))
            if limit is not None:
                limits.append(limit)
    return min(limits) if limits else None
