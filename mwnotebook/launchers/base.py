"""What the cluster core needs from a started worker kernel, whatever started it (local, SSH)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class KernelHandle(Protocol):
    """One running worker kernel process.

    ``connection_info`` is what a jupyter_client ``AsyncKernelClient`` loads to talk to the
    kernel from the notebook's machine (for a remote kernel: the forwarded local endpoints).
    """

    index: int
    host: str  # "localhost" for local workers; the SSH host otherwise
    #: True when the kernel's process is a process of this machine, its ``pid`` a pid here (local
    #: kernels); False for a kernel on another host, node or Ray worker (its pid is a number there).
    #: Stated by the launcher that started it, published as it is (registry/publication.py): only a
    #: process on this machine is ever signalled by the clusters panel's sweep or interrupt.
    on_this_machine: bool

    @property
    def connection_info(self) -> dict[str, Any]: ...

    @property
    def pid(self) -> int | None: ...

    async def is_alive(self) -> bool: ...

    def exit_description(self) -> str:
        """Why the process ended, e.g. ``killed by SIGKILL`` or ``exit code 1``; '' while alive."""
        ...

    async def interrupt(self) -> None:
        """Send SIGINT to the kernel (ipykernel turns it into KeyboardInterrupt)."""
        ...

    async def kill(self) -> None:
        """Stop the process at once and release everything it held (sockets, tunnels, files)."""
        ...


@runtime_checkable
class Launcher(Protocol):
    """Starts the kernels of a cluster's TensorFlow tasks. ``env`` is the full set of variables the
    kernel needs on top of the launcher's base environment (TF_CONFIG, CUDA_VISIBLE_DEVICES, ...).

    Every task has a *launch slot* (config/task_placement.py ``launch_slots``): the kernels that run
    the cell are ``0..k-1`` in ``RoleLayout.cell_tasks()`` order (MWMS replica ``i`` is slot ``i``),
    a ``--ps`` cluster's worker and ps servers ``SERVER_SLOT_BASE + i``. A launcher that places tasks
    on several machines is built with the cluster's ``TaskPlacement`` (the same module; SSH: the
    spec's ``task_placement``; Slurm: placed with ``place_tasks`` once its nodes are known) and
    starts each slot's task, and reserves each training task's port, on that task's host. A
    launcher on one machine (local) ignores which task a slot is.
    """

    async def tf_addresses(self, count: int) -> list[str]:
        """``host:port`` of each of the ``count`` training tasks (``RoleLayout.training_tasks()``
        order: TF_CONFIG's cluster list), each on its task's host. The ports stay reserved until the
        next call or :meth:`close`, so a task restarted with the same environment binds its port
        again (a lost worker server comes back on its address)."""
        ...

    async def start(self, index: int, env: Mapping[str, str]) -> KernelHandle:
        """Start the kernel of launch slot ``index`` (on its task's host); called again with the same
        slot and ``env`` to restart a lost task."""
        ...

    async def close(self) -> None:
        """Release launcher-wide resources (runtime directory, SSH connections)."""
        ...
