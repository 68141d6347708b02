"""``--ray-ssh HOST``: reach a Ray cluster's workers from off its network, through one SSH
connection to a host on it (the head, usually).

Ray forwards no arbitrary ports: a driver or a Ray Client reaches the head, but the relays'
(``node_relay.py``) and the kernels' ports on the worker nodes are plain TCP ports on the cluster's
network. With ``--ray-ssh`` each of them is an SSH local forward on the notebook's loopback to the
node's address, all over one SSH host link (``launchers/ssh/host_link.py``, as ``--slurm-login`` holds
for Slurm nodes and the SSH launcher per host): made as ``ssh`` would make it (the user's config,
known_hosts, ProxyJump) with the same keepalive, so a silently dead network is noticed in seconds.
TensorFlow's addresses stay the nodes' own: the workers talk to each other inside the cluster. A
``ray://`` address goes through a forward too.

The connection and its forwards run on an event loop of their own, in a thread: Ray's own calls
block the thread that makes them (creating an actor through Ray Client waits for the head's
answer), and a forward served by the engine's loop would wait for that loop, so a Ray Client call
made on it would wait for itself (measured: the client gave up after its 30 s reconnection grace).

A lost connection is final for the cluster: every forwarded connection (the agents' channels, the
kernels' sockets, a Ray Client's) ended with it, so the workers are gone; the link is made with
``loss_is_final``, so :meth:`JumpHost.forward` then says so, and the user starts the cluster again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import asyncssh

from mwnotebook.config.hosts import parse_host
from mwnotebook.launchers.remote.kernel_start import KEEPALIVE_COUNT_MAX, KEEPALIVE_INTERVAL
from mwnotebook.launchers.ssh.host_link import HostLink, LinkSettings

__all__ = ["Forward", "JumpHost"]

log = logging.getLogger(__name__)

#: Seconds the SSH host may take to answer and authenticate (unless its ssh config's ConnectTimeout says less).
CONNECT_SECONDS = 10.0

T = TypeVar("T")


class Forward:
    """One local forward; :meth:`close` from any thread (the kernel's handle closes it)."""

    def __init__(self, listener: asyncssh.SSHListener, loop: asyncio.AbstractEventLoop) -> None:
        self.port = listener.get_port()
        self._listener = listener
        self._loop = loop

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._listener.close)


class JumpHost:
    """``--ray-ssh``'s host link (its loss final) and the forwards through it, on a loop of its own."""

    def __init__(self, target: str, ssh_config: str | None = None, connect_timeout: float = CONNECT_SECONDS) -> None:
        self.spec = target
        self.host = parse_host(target)
        self.target = self.host.target
        self.link = HostLink(self.host, LinkSettings(connect_timeout, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT_MAX,
                                                     ssh_config), name=f"--ray-ssh {self.target}", loss_is_final=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        #: Forwards that live as long as the connection (the relays' ports), by ``(address, port)``.
        self._kept: dict[tuple[str, int], Forward] = {}

    async def _on_own_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the connection's loop; the caller's cancellation cancels it there too."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=loop.run_forever, name=f"mwnotebook-ray-ssh-{self.target}",
                                            daemon=True)
            self._thread.start()
            self._loop = loop
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def connect(self) -> None:
        """Open the connection (once): a :class:`ClusterStartError` naming the host and the cause,
        within the connect timeout, when it cannot be made (or was lost)."""
        first = self.link.connections == 0
        await self._on_own_loop(self.link.connection())
        if first:
            log.info("--ray-ssh: connected to %s", self.target)

    def check(self) -> None:
        """A :class:`ClusterStartError` when the connection was lost."""
        self.link.check()

    async def probe(self, address: str, port: int) -> str:
        """'' when something on the SSH host's side accepts a connection at ``address:port``, else
        why not (a local forward accepts at once whatever lies behind it)."""
        return await self._on_own_loop(self.link.probe(address, port))

    async def forward(self, address: str, port: int) -> tuple[str, int, Forward]:
        """A local port forwarded to ``address:port`` as the SSH host sees it: ``(ip, port, forward)``
        where the notebook connects (the caller closes the forward)."""
        ip, local, listener = await self._on_own_loop(self.link.forward(address, port))
        assert self._loop is not None
        forward = Forward(listener, self._loop)
        log.debug("--ray-ssh: %s:%d -> %s:%d through %s", ip, local, address, port, self.target)
        return ip, local, forward

    async def route(self, address: str, port: int) -> tuple[str, int]:
        """Where the notebook connects to reach ``address:port``: one forward per address, kept
        until :meth:`close` (a relay's port, a Ray Client's)."""
        kept = self._kept.get((address, port))
        if kept is None:
            ip, local, kept = await self.forward(address, port)
            self._kept[(address, port)] = kept
            return ip, local
        self.check()  # a lost connection: said now, not as a refused local port
        return "127.0.0.1", kept.port

    def lost(self) -> str:
        """Why the connection ended ('' while it is open, or when it was closed here)."""
        return self.link.lost()

    async def close(self) -> None:
        """Close the forwards and the connection, and end the loop's thread."""
        kept, self._kept = list(self._kept.values()), {}
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            await self.link.close()  # never connected: a start still running sees "stopping"
            return
        for forward in kept:
            forward.close()
        try:
            await asyncio.wait_for(self._on_own_loop(self.link.close()), 15)
        except Exception:
            log.debug("closing the --ray-ssh connection to %s failed", self.target, exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 5)
        if not thread.is_alive():
            loop.close()
