"""Each worker's CPU share and resident memory, on whatever machine it runs.

A worker on this machine is read here with psutil (as the clusters panel's server does,
server/service.py); a worker on another host (SSH, Slurm) is read on that host by its agent, from
/proc (``launchers/remote/kernel_handle.py`` ``take_usage``, ``processes/shipped/remote_agent.py``
``usage``). Both give the CPU share as percent of one core since the previous reading of that worker
by the same reader (or since its start, for the first): the status table's poll while a cell runs and
``Cluster.usage()`` (``%mwcluster status``) are two readers, so one never shortens the other's
interval (a poll just after a cell's last busy second made the next status read 0 %); the resident
set (/proc/PID/statm's resident pages, what psutil reports as ``rss``); and the memory limit it lives
under, flagged when the worker is near it.

The limit is what ends the kernel when its memory passes it, the smallest of (proc_usage.py
``memory_limit``, read on the worker's host): the host's memory (``MemTotal``: the kernel's
out-of-memory killer); its memory cgroup's limit and its ancestors' (a container, a hub spawner that
enforces ``MEM_LIMIT`` such as systemdspawner or DockerSpawner, Slurm's cgroup plugin); on Slurm the
job's ``--mem`` / ``--mem-per-cpu`` on the node, which Slurm enforces with or without a cgroup. On Ray
it is the node's memory as on an SSH host: mwnotebook asks Ray for CPUs and GPUs only, and Ray's
``memory`` resource is a scheduling figure Ray does not enforce; Ray's memory monitor ends workers at
0.95 of the node's memory, after the flag. ``MEM_LIMIT`` alone (config/class_caps.py) is not a limit
here: it sizes starts (a start whose estimate passes it is refused); a spawner that does not enforce
it kills nothing at it, and one that does makes it the server's cgroup limit, read as above.

Such a limit holds for every process under it, so the memory counted against it (``limit_used``) is
the resident memory of all of this cluster's workers on the same host under the same limit (two
workers of one Slurm node share the job's ``--mem``); a worker is flagged (``near_limit``) when that
sum is at :data:`NEAR_LIMIT` of the limit or more (proc_usage.py says why 90 %).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import psutil

from mwnotebook.engine.workers.worker import Worker
from mwnotebook.launchers.capabilities import TakesUsage
from mwnotebook.processes.shipped.proc_usage import NEAR_LIMIT, memory_limit, near
from mwnotebook.shared.events import EventSink, WorkerResources

log = logging.getLogger(__name__)

__all__ = ["NEAR_LIMIT", "USAGE_EVERY", "UsageReader", "WorkerUsage", "cpu_share", "shared_limits"]

#: Seconds between two readings while a cell runs (one short line per remote worker each time).
USAGE_EVERY = 2.0
#: Seconds to wait for a remote agent's answer (its host's /proc read is instant; this is the way there).
USAGE_TIMEOUT = 10.0


@dataclass(frozen=True)
class WorkerUsage:
    """One worker's figures; ``cpu_percent``/``memory_bytes`` None and ``note`` saying why when unknown."""

    index: int
    host: str
    pid: int | None
    cpu_percent: float | None
    memory_bytes: int | None
    note: str = ""
    #: The smallest limit it lives under (the module docstring: host memory, cgroup, Slurm's --mem).
    memory_limit: int | None = None
    #: The memory counted against the limit: this cluster's workers' resident memory on the same host
    #: under the same limit, summed (:func:`shared_limits`); None: this worker's alone.
    limit_used: int | None = None

    @property
    def near_limit(self) -> bool:
        """The memory counted against the limit at :data:`NEAR_LIMIT` of it or more."""
        return near(self.limit_used if self.limit_used is not None else self.memory_bytes, self.memory_limit)


def shared_limits(usages: Sequence[WorkerUsage]) -> list[WorkerUsage]:
    """``usages`` with ``limit_used`` set: the workers of one host that report the same limit live
    under it together, so each counts their resident memory summed."""
    totals: dict[tuple[str, int], int] = {}
    for u in usages:
        if u.memory_limit is not None and u.memory_bytes is not None:
            key = (u.host, u.memory_limit)
            totals[key] = totals.get(key, 0) + u.memory_bytes
    return [replace(u, limit_used=totals[(u.host, u.memory_limit)])
            if u.memory_limit is not None and u.memory_bytes is not None else u for u in usages]


def cpu_share(cpu: float, age: float, before: tuple[float, float] | None) -> float:
    """Percent of one core between two readings of ``(CPU seconds, seconds since the process
    started)``; since the start when there is no earlier reading (``before`` None)."""
    before_cpu, before_age = before if before is not None else (0.0, 0.0)
    elapsed = age - before_age
    return round(100.0 * (cpu - before_cpu) / elapsed, 1) if elapsed > 0 else 0.0


class UsageReader:
    """Reads the workers' usage; keeps this reader's previous CPU reading of each worker (by host and
    pid), so that each figure covers the time since this reader's previous one."""

    def __init__(self) -> None:
        self._previous: dict[tuple[str, int], tuple[float, float]] = {}

    def _share(self, key: tuple[str, int], cpu: float, age: float) -> float:
        before = self._previous.get(key)
        if before is not None and (age < before[1] or cpu < before[0]):
            before = None  # a younger process with the same pid: another process, counted from its start
        self._previous[key] = (cpu, age)
        return cpu_share(cpu, age, before)

    def _local(self, worker: Worker) -> WorkerUsage:
        handle = worker.handle
        pid = handle.pid
        if pid is None:
            return WorkerUsage(handle.index, handle.host, None, None, None, "not started")
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                started = proc.create_time()
                times = proc.cpu_times()
                resident = proc.memory_info().rss
            environ = proc.environ()  # a Slurm job's --mem, for a notebook that runs in one
        except psutil.Error as exc:
            return WorkerUsage(handle.index, handle.host, pid, None, None, f"cannot read process {pid}: {exc}")
        percent = self._share((handle.host, pid), times.user + times.system, time.time() - started)
        return WorkerUsage(handle.index, handle.host, pid, percent, resident,
                           memory_limit=memory_limit(pid, environ=environ))

    async def _one(self, worker: Worker, timeout: float) -> WorkerUsage:
        handle = worker.handle
        if isinstance(handle, TakesUsage):
            cpu, age, memory, limit, note = await handle.take_usage(timeout)
            pid = handle.pid
            percent = None
            if cpu is not None and age is not None and pid is not None:
                percent = self._share((handle.host, pid), cpu, age)
            return WorkerUsage(handle.index, handle.host, pid, percent, memory, note, limit)
        if getattr(handle, "on_this_machine", False):
            return self._local(worker)
        return WorkerUsage(handle.index, handle.host, handle.pid, None, None,
                           "this engine's workers report no CPU or memory")

    async def read(self, workers: Sequence[Worker], timeout: float = USAGE_TIMEOUT) -> list[WorkerUsage]:
        """Every worker's usage, read at once (the memory counted against each limit: :func:`shared_limits`)."""
        return shared_limits(await asyncio.gather(*(self._one(w, timeout) for w in workers)))

    async def poll(self, workers: Callable[[], Sequence[Worker]], emit: EventSink,
                   every: float = USAGE_EVERY) -> None:
        """While a cell runs (cancelled at its end): every ``every`` seconds, each worker's figures as a
        :class:`~mwnotebook.shared.events.WorkerResources` event, for the status table under the cell."""
        while True:
            await asyncio.sleep(every)
            try:
                usages = await self.read(workers())
            except Exception:  # a reading must never disturb the cell
                log.debug("worker usage not read", exc_info=True)
                continue
            for u in usages:
                emit(WorkerResources(u.index, u.cpu_percent, u.memory_bytes, u.memory_limit, u.near_limit))
