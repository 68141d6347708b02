"""What some launchers and kernel handles can do beyond :mod:`mwnotebook.launchers.base`.

Each optional capability is one small Protocol, so that the engine asks ``isinstance(launcher,
AbortsStart)`` instead of guessing with ``getattr`` (a misspelt name would silently read as "not
there"), and mypy checks the implementations. Who has what today:

| capability | implemented by |
|---|---|
| :class:`Isolates` (``isolated``) | ``launchers/local/launcher.py`` ``LocalLauncher`` |
| :class:`AbortsStart` (``abort_start``) | ``SlurmLauncher``, ``RayLauncher`` |
| :class:`ReportsJob` (``status``) | ``launchers/slurm/launcher.py`` ``SlurmLauncher`` |
| :class:`OwnsAllocation` (``owns_allocation``) | ``SlurmLauncher`` |
| :class:`ReplacesNodes` (``replace_lost_nodes``) | ``SlurmLauncher``, ``RayLauncher`` |
| :class:`HasLogTail` (``log_tail``) | local and remote kernel handles |
| :class:`TakesStacks` (``take_stacks``) | remote kernel handles (``launchers/remote/kernel_handle.py``) |
| :class:`TakesUsage` (``take_usage``) | remote kernel handles (``launchers/remote/kernel_handle.py``) |
| :class:`HasConnectionFile` (``connection_file``) | local kernel handles (forked or fresh) |

A worker's ``output_log`` is no capability: every engine ``Worker`` has one
(``engine/cell/run.py`` ``RunWorker``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Isolates(Protocol):
    """A launcher that may keep the workers' TensorFlow ports in a private network namespace."""

    @property
    def isolated(self) -> bool:
        """True when it does, for the workers started now."""
        ...


@runtime_checkable
class AbortsStart(Protocol):
    """A launcher whose start can wait (a scheduler's queue) and can be given up at once."""

    def abort_start(self) -> None:
        """End a start that is waiting; safe to call at any time, from the loop's thread."""
        ...


@runtime_checkable
class ReportsJob(Protocol):
    """A launcher whose workers run inside a batch job."""

    async def status(self) -> dict[str, Any]:
        """The job the workers run in: ``job_id``, ``nodes``, ``state``; a launcher that also
        :class:`OwnsAllocation` says ``owned`` (as ``owns_allocation``) and ``login`` (where its
        Slurm commands run, or None). The clusters panel publishes these as they are."""
        ...


@runtime_checkable
class OwnsAllocation(Protocol):
    """A launcher whose workers run in an allocation it may have made itself (a batch job)."""

    @property
    def owns_allocation(self) -> bool:
        """True when the launcher made the allocation and ends it; False for one the user gave
        (and before there is one). Nothing else may end an allocation that is not owned."""
        ...


@runtime_checkable
class ReplacesNodes(Protocol):
    """A launcher whose workers may have to come back elsewhere after a loss (a failed node)."""

    async def replace_lost_nodes(self) -> list[str]:
        """Called before fresh workers start after a loss: move workers off places that are gone.
        Returns one line per move since the TF addresses were last reserved (the caller then
        reserves new ones); [] when every worker can come back in place. Raises
        :class:`~mwnotebook.errors.CannotRestartError` when no place can be found."""
        ...


@runtime_checkable
class HasLogTail(Protocol):
    """A kernel handle that keeps the kernel's own log (what it wrote before it could talk)."""

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of that log ('' when there is none)."""
        ...


@runtime_checkable
class TakesStacks(Protocol):
    """A kernel handle whose kernel's stacks are taken on its own host (by its remote agent)."""

    async def take_stacks(self, timeout: float) -> tuple[str, int | None, str]:
        """``(faulthandler text, main thread id, note)``: text '' and a note saying why when there
        is no dump (``processes/shipped/stack_dump.py`` ``take``)."""
        ...


@runtime_checkable
class TakesUsage(Protocol):
    """A kernel handle whose kernel's CPU and memory are read on its own host (by its remote agent)."""

    async def take_usage(self, timeout: float) -> tuple[float | None, float | None, int | None, int | None, str]:
        """``(cpu_seconds, age, memory_bytes, memory_limit, note)``: from /proc on the kernel's host
        (CPU seconds used and seconds since the kernel started: raw counters, which each reader turns
        into a share over its own interval); None and a note saying why when they cannot be read."""
        ...


@runtime_checkable
class HasConnectionFile(Protocol):
    """A kernel handle whose connection file is on this machine (signals and files beside it work)."""

    connection_file: str
