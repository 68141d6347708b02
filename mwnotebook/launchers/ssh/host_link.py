"""One SSH link to one host, written once for every launcher that talks SSH: the SSH launcher holds
one per ``--hosts`` host (``launchers/ssh/launcher.py``), the Slurm login node is one
(``launchers/slurm/shell.py``), ``--ray-ssh`` is one (``launchers/ray/ssh_jump.py``).

A link is one or more connections to its host, each made as ``ssh`` would make it
(``connect.py``: the user's SSH config, known_hosts, ProxyJump) with mwnotebook's keepalive, so a
silently dead network is noticed in ``interval * (count + 1)`` seconds. What it does for its holder:

* **Sessions and MaxSessions fall-over** (:meth:`HostLink.session`): a session (a command, an
  agent's channel) goes to the newest live connection with room; when sshd refuses another session
  there (its MaxSessions, 10 by default) that connection is marked full and the next one opens, up
  to ``max_connections``; when all of those are full the marks are forgotten once (sessions on them
  may have ended since) before the link gives up naming the refusal (:func:`fall_over`).
* **Reconnects**: a connection that closed is dropped (its loss remembered for :meth:`HostLink.lost`
  and logged); the next session opens a new one. With a ``reconnect_window`` (the SSH launcher's), a
  host reached before gets that many seconds to come back when it does not answer (a restart after
  its network failed); a new host, or a refusal by SSH itself, fails at once
  (:func:`may_try_again`). With ``loss_is_final`` (``--ray-ssh``: every forwarded connection ended
  with it) a lost connection is not replaced: every later use says it was lost.
* **Forwards** (:meth:`HostLink.forward`): a local port on the notebook's loopback forwarded to an
  address as the host sees it (port forwards are not sessions: MaxSessions does not count them).
* :meth:`HostLink.lost` says why a connection ended ('' while open, or when closed here);
  :meth:`HostLink.close` closes every connection and the jump hosts they run through.

Errors are :class:`~mwnotebook.errors.ClusterStartError`, each starting with the link's ``name`` (the
host, or the option that named it: ``--slurm-login HOST``, ``--ray-ssh HOST``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncssh

from mwnotebook.config.hosts import HostSpec
from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.ssh.connect import SSHConnectError, SSHConnection, loss_reason, open_connection

__all__ = ["HostLink", "LinkSettings", "fall_over", "may_try_again"]

log = logging.getLogger(__name__)

#: Connections to one host before the ones marked full are tried again.
MAX_CONNECTIONS = 16
#: Seconds on top of the connect timeout that a whole connection (its ProxyJump hops included) may take.
OPEN_MARGIN = 5.0

T = TypeVar("T")
C = TypeVar("C")


@dataclass(frozen=True)
class LinkSettings:
    """How every connection of a link is made (the same for all of a launcher's links)."""

    connect_timeout: float = 10.0
    keepalive_interval: float = 2.0
    keepalive_count_max: int = 3
    #: ``ssh -F FILE`` (None: $MWNOTEBOOK_SSH_CONFIG, else OpenSSH's own choice).
    ssh_config: str | None = None
    #: More asyncssh connect options (tests, special set-ups).
    extra_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def keepalive_seconds(self) -> float:
        """How long a silently dead network takes to be noticed."""
        return self.keepalive_interval * (self.keepalive_count_max + 1)


def fall_over(live: Sequence[C], full: Collection[C], limit: int) -> tuple[C | None, bool]:
    """Which live connection takes the next session: ``(connection, forget_full)``; ``None``: open a
    new one. The newest one with room; none with room and fewer than ``limit``: a new one; ``limit``
    all full: forget the marks (``forget_full``) and take the newest again."""
    for conn in reversed(live):
        if conn not in full:
            return conn, False
    if len(live) < limit:
        return None, False
    return (live[-1] if live else None), True


def may_try_again(transient: bool, stopping: bool, now: float, deadline: float) -> bool:
    """After a failed connection attempt: another one only for a host that did not answer (not a
    refusal by SSH), while the link is not closing, before the reconnect window's ``deadline``."""
    return transient and not stopping and now <= deadline


Opener = Callable[[], Awaitable[SSHConnection]]


class HostLink:
    """SSH connections to one host (see the module docstring).

    ``opener`` makes one connection (default: :func:`~mwnotebook.launchers.ssh.connect.open_connection`
    with ``settings``); unit tests pass their own."""

    def __init__(self, spec: HostSpec, settings: LinkSettings, *, name: str | None = None,
                 reconnect_window: float = 0.0, loss_is_final: bool = False,
                 max_connections: int = MAX_CONNECTIONS, opener: Opener | None = None) -> None:
        self.spec = spec
        self.target = spec.target
        self.name = name or spec.target
        self.settings = settings
        self.reconnect_window = reconnect_window
        self.loss_is_final = loss_is_final
        self.max_connections = max_connections
        self._opener = opener or self._open
        self._sessions: list[SSHConnection] = []
        self._full: set[asyncssh.SSHClientConnection] = set()
        self._lock = asyncio.Lock()
        self._reached = False
        self._lost = ""
        self._closing = False

    async def _open(self) -> SSHConnection:
        s = self.settings
        return await open_connection(self.spec, connect_timeout=s.connect_timeout,
                                     keepalive_interval=s.keepalive_interval,
                                     keepalive_count_max=s.keepalive_count_max, ssh_config=s.ssh_config,
                                     extra_options=s.extra_options)

    @property
    def connections(self) -> int:
        """How many connections are open now."""
        return len([s for s in self._sessions if not s.conn.is_closed()])

    def _error(self, what: str) -> ClusterStartError:
        return ClusterStartError(f"{self.name}: {what}", host=self.target)

    def _lost_error(self, reason: str) -> ClusterStartError:
        return self._error(f"the SSH connection was lost ({reason}), and the workers with it; "
                           "stop the cluster (%mwcluster stop) and start it again")

    def _drop_closed(self) -> None:
        for session in [s for s in self._sessions if s.conn.is_closed()]:
            reason = loss_reason(session.conn, self.settings.keepalive_seconds)
            self._lost = self._lost or reason or "the SSH connection closed"
            log.warning("the SSH connection to %s was lost (%s)", self.target, reason or "closed")
            self._sessions.remove(session)
            self._full.discard(session.conn)

    async def connection(self) -> asyncssh.SSHClientConnection:
        """A live connection with room for another session (a new one when each is full or lost)."""
        async with self._lock:
            if self._closing:
                raise self._error("the cluster is stopping")
            self._drop_closed()
            if self.loss_is_final and self._lost:
                raise self._lost_error(self._lost)
            live = [s.conn for s in self._sessions]
            conn, forget = fall_over(live, self._full, self.max_connections)
            if forget:
                self._full.clear()  # sessions on them have ended since, perhaps: try them again
            if conn is not None:
                return conn
            session = await self._connect()
            self._sessions.append(session)
            return session.conn

    async def _connect(self) -> SSHConnection:
        # A host reached before gets the reconnect window to come back; a new one fails at the
        # first refusal or silence.
        deadline = time.monotonic() + (self.reconnect_window if self._reached else 0.0)
        bound = self.settings.connect_timeout + OPEN_MARGIN
        while True:
            try:
                session = await asyncio.wait_for(self._opener(), bound)
                break
            except SSHConnectError as exc:
                if not may_try_again(exc.transient, self._closing, time.monotonic(), deadline):
                    raise self._error(str(exc)) from None
                log.info("%s: %s; trying again until it is back", self.target, exc)
            except asyncio.TimeoutError:
                if not may_try_again(True, self._closing, time.monotonic(), deadline):
                    raise self._error(f"no SSH connection within {bound:.0f} s") from None
            await asyncio.sleep(1)
        self._reached = True
        log.debug("connected to %s (%s)", self.target, session.target.source)
        return session

    async def session(self, start: Callable[[asyncssh.SSHClientConnection], Awaitable[T]]
                      ) -> tuple[asyncssh.SSHClientConnection, T]:
        """``start(conn)`` (which opens one SSH session) on a connection with room: on a refusal
        (``asyncssh.ChannelOpenError``, MaxSessions) the next connection (:func:`fall_over`)."""
        for _ in range(2 * self.max_connections):
            conn = await self.connection()
            try:
                return conn, await start(conn)
            except asyncssh.ChannelOpenError as exc:
                log.debug("%s refused another session (%s); trying another connection", self.target, exc.reason)
                self._full.add(conn)
        raise self._error(f"the SSH server refused more sessions (after {self.max_connections} connections)")

    async def forward(self, address: str, port: int, via: asyncssh.SSHClientConnection | None = None
                      ) -> tuple[str, int, asyncssh.SSHListener]:
        """A port on the notebook's loopback forwarded to ``address:port`` as the host sees it:
        ``(ip, port, listener)`` (the caller closes the listener). ``via``: the connection to use
        (default: the newest live one)."""
        conn = via or await self.connection()
        try:
            listener = await conn.forward_local_port("127.0.0.1", 0, address, port)
        except (asyncssh.Error, OSError) as exc:
            raise self._error(f"could not forward a port to {address}:{port} ({exc})") from None
        return "127.0.0.1", listener.get_port(), listener

    async def probe(self, address: str, port: int) -> str:
        """'' when something on the host's side accepts a connection at ``address:port``, else why
        not (a local forward accepts at once whatever lies behind it)."""
        conn = await self.connection()
        timeout = self.settings.connect_timeout
        try:
            _, writer = await asyncio.wait_for(conn.open_connection(address, port), timeout)
        except (asyncssh.Error, OSError) as exc:
            return str(exc) or type(exc).__name__
        except asyncio.TimeoutError:
            return f"no answer within {timeout:.0f} s"
        writer.close()
        return ""

    def check(self) -> None:
        """A :class:`ClusterStartError` when a connection of a link whose loss is final was lost (it
        only reads: callable from another thread than the link's loop, as ``--ray-ssh``'s launcher does)."""
        reason = self.lost() if self.loss_is_final else ""
        if reason:
            raise self._lost_error(reason)

    def lost(self, conn: asyncssh.SSHClientConnection | None = None) -> str:
        """Why ``conn`` (default: any connection of the link) ended; '' while open, or when closed here."""
        if self._closing:
            return ""
        if conn is not None:
            return loss_reason(conn, self.settings.keepalive_seconds) if conn.is_closed() else ""
        for session in self._sessions:
            if session.conn.is_closed():
                return loss_reason(session.conn, self.settings.keepalive_seconds) or "the SSH connection closed"
        return self._lost

    async def close(self) -> None:
        """Close every connection (a later use says the cluster is stopping)."""
        self._closing = True  # now: a reconnect under way (holding the lock) gives up at its next try
        async with self._lock:
            sessions, self._sessions = self._sessions, []
            self._full.clear()
        for session in sessions:
            session.close()
        await asyncio.gather(*(s.wait_closed() for s in sessions), return_exceptions=True)
