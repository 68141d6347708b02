"""A remote launcher's book, written once for the SSH, Slurm and Ray launchers: the agents that hold
TensorFlow ports (each reserved the same way: ``configure`` in the ``ports`` role, its first event,
the ports it names) and the kernel handles started, so that a new reservation releases the last one
and :meth:`RemoteBook.close` kills every kernel and releases every port. What differs per backend
(how an agent starts, the address a host is reached at) stays with the launcher."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from mwnotebook.config.tf_config import format_address
from mwnotebook.launchers.remote.agent_events import AgentEvent
from mwnotebook.launchers.remote.kernel_handle import RemoteKernelHandle

__all__ = ["PortHolder", "RemoteBook"]


class PortHolder(Protocol):
    """An agent run that can hold ports (``SSHAgent``, ``SrunAgent``, ``RelayAgent``)."""

    def configure(self, config: Mapping[str, Any]) -> None: ...

    async def close(self) -> None: ...


class RemoteBook:
    """The port holders and kernel handles of one launcher."""

    def __init__(self) -> None:
        self._holders: list[PortHolder] = []
        self._handles: list[RemoteKernelHandle] = []

    async def reserve_ports(self, agent: PortHolder, indices: Sequence[int], require: Sequence[str],
                            first_event: Callable[[], Awaitable[AgentEvent]],
                            address: Callable[[AgentEvent], str], addresses: list[str]) -> None:
        """Hold one TCP port on the agent's host for each training task in ``indices`` until
        :meth:`release_ports`, and write ``addresses[i]`` (``host:port``: ``address(event)`` names the
        host). ``first_event``: the agent's first event, in the backend's words when it fails
        (``kernel_start.py`` ``first_event``). The agent is booked even when this fails, so that the
        release closes it."""
        self._holders.append(agent)
        agent.configure({"role": "ports", "count": len(indices), "require": list(require)})
        event = await first_event()
        host = address(event)
        for index, port in zip(indices, event["ports"]):
            addresses[index] = format_address(host, int(port))

    async def release_ports(self, also: Iterable[PortHolder] = ()) -> None:
        """Close the port holders (and ``also``: agents started ahead of time)."""
        holders, self._holders = self._holders, []
        await asyncio.gather(*(h.close() for h in [*holders, *also]), return_exceptions=True)

    def keep(self, handle: RemoteKernelHandle) -> RemoteKernelHandle:
        """Book a started kernel (the ended ones are forgotten)."""
        self._handles = [*self.handles, handle]
        return handle

    @property
    def handles(self) -> list[RemoteKernelHandle]:
        """The kernels started and not ended."""
        return [h for h in self._handles if not h.ended]

    async def kill_kernels(self) -> None:
        """Kill every kernel booked (a launcher's close, before the ports are released)."""
        handles, self._handles = self._handles, []
        await asyncio.gather(*(h.kill() for h in handles), return_exceptions=True)
