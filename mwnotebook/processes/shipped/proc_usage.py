"""A process's CPU time, resident memory and memory limit, from /proc and /sys/fs/cgroup (stdlib
only: used by the remote agent on a worker's host, remote_agent.py ``usage``, and by
``mwnotebook/engine/usage.py`` for workers on the notebook's machine)."""

from __future__ import annotations

import os
from collections.abc import Mapping

#: A worker whose memory counted against its limit is at least this share of it is flagged (``near``).
#: Why 0.9: Ray's memory monitor starts killing workers when its node passes 0.95 of its memory (its
#: ``RAY_memory_usage_threshold``), so the flag must come before that; and the 10 % left (400 MiB of
#: 4 GiB) is about what one more TensorFlow step, a copy of the batch or a checkpoint being saved,
#: may take at once: past it the kernel is one such allocation away from being killed.
NEAR_LIMIT = 0.9
_MIB = 2 ** 20

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


def near(used: int | None, limit: int | None) -> bool:
    """``used`` bytes are at :data:`NEAR_LIMIT` of ``limit`` or more."""
    return bool(used and limit and used >= NEAR_LIMIT * limit)


def slurm_memory(environ: Mapping[str, str]) -> int | None:
    """The memory a Slurm job has on this node, from the variables Slurm sets in its steps: ``--mem``
    (``SLURM_MEM_PER_NODE``, MiB) or ``--mem-per-cpu`` (``SLURM_MEM_PER_CPU`` MiB times
    ``SLURM_CPUS_ON_NODE``). What Slurm enforces, by its cgroup (then read from the cgroup as well) or
    by its accounting's kill of a job past it. A step has them when srun had them: a notebook that
    runs in the job (salloc's shell, a batch script). None outside a job or for a job without either."""
    def number(name: str) -> int | None:
        text = environ.get(name, "").strip()
        return int(text) if text.isdigit() and int(text) > 0 else None

    per_node, per_cpu, cpus = number("SLURM_MEM_PER_NODE"), number("SLURM_MEM_PER_CPU"), number("SLURM_CPUS_ON_NODE")
    if per_node is not None:
        return per_node * _MIB
    if per_cpu is not None and cpus is not None:
        return per_cpu * cpus * _MIB
    return None


def memory_limit(pid: int, root: str = "/", environ: Mapping[str, str] | None = None) -> int | None:
    """The smallest memory limit the process lives under: the machine's memory (``MemTotal``), every
    limit of its memory cgroup and the cgroup's ancestors (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``) and, given the environment of a Slurm job step (``environ``), the job's
    memory on this node (:func:`slurm_memory`). None when none can be read. ``root``: for tests."""
    limits: list[int] = []
    slurm = slurm_memory(environ) if environ is not None else None
    if slurm is not None:
        limits.append(slurm)
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
