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
    """Starts worker kernels. ``env`` is the full set of variables the worker needs on top of the
    launcher's base environment (TF_CONFIG, CUDA_VISIBLE_DEVICES, ...)."""

    async def tf_addresses(self, count: int) -> list[str]:
        """``host:port`` of each worker's TensorFlow server (TF_CONFIG's cluster list), ports reserved."""
        ...

    async def start(self, index: int, env: Mapping[str, str]) -> KernelHandle: ...

    async def close(self) -> None:
        """Release launcher-wide resources (runtime directory, SSH connections)."""
        ...
