"""Where the Slurm client commands (salloc, srun, squeue, scontrol, scancel) run, and how a kernel on a
node is reached from the notebook:

* :class:`LocalSlurm`: on this machine, which is on the cluster's network (a login node, a JupyterHub
  or Open OnDemand session, inside an allocation): kernels are reached at their node's address.
* :class:`LoginSlurm` (``--slurm-login HOST``): on a login node over one SSH connection (asyncssh, the
  user's SSH config as for ``--hosts``, ProxyJump included). The notebook (a laptop, a workstation)
  reaches the login node but not the compute nodes: each command is an SSH session, an srun's
  stdin/stdout (the agent's JSON-lines channel) is that session's, and each kernel port is an SSH
  local forward through the login node to the node's address.

Both hand out :class:`SlurmProcess` objects with the same surface (``stdin``/``stdout``/``stderr``
streams of bytes, ``wait``, ``returncode``, ``terminate``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
from collections.abc import Sequence
from typing import Any, Protocol

import asyncssh

from mwnotebook.config.hosts import parse_host
from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.remote.kernel_start import KEEPALIVE_COUNT_MAX, KEEPALIVE_INTERVAL, KEEPALIVE_SECONDS
from mwnotebook.launchers.ssh.connect import SSHConnectError, SSHConnection, loss_reason, open_connection

__all__ = ["LocalSlurm", "LoginSlurm", "SlurmProcess", "SlurmShell"]

log = logging.getLogger(__name__)

#: Connections to the login node before refused sessions are tried again on the full ones.
MAX_CONNECTIONS = 8


class _Reader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...
    async def readline(self) -> bytes: ...


class SlurmProcess:
    """A running Slurm client command: a local subprocess or an SSH session on the login node."""

    def __init__(self, process: Any, remote: bool) -> None:
        self._process = process
        self.remote = remote
        self.stdout: _Reader = process.stdout
        self.stderr: _Reader = process.stderr

    def write(self, data: bytes) -> None:
        with contextlib.suppress(Exception):
            self._process.stdin.write(data)

    def close_stdin(self) -> None:
        with contextlib.suppress(Exception):
            if self.remote:
                self._process.stdin.write_eof()
            else:
                self._process.stdin.close()

    @property
    def returncode(self) -> int | None:
        code: int | None = self._process.returncode
        return code

    async def wait(self) -> int | None:
        if self.remote:
            await self._process.wait_closed()
        else:
            await self._process.wait()
        return self.returncode

    def terminate(self) -> None:
        """SIGTERM (srun cancels its step, a pending salloc withdraws); over SSH also the channel's
        end, which the remote side sees as stdin EOF even where sshd ignores signal requests."""
        with contextlib.suppress(Exception):
            self._process.terminate()
        if self.remote:
            with contextlib.suppress(Exception):
                self._process.close()

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self._process.kill()
        if self.remote:
            with contextlib.suppress(Exception):
                self._process.close()


class SlurmShell:
    """Runs Slurm client commands; see :class:`LocalSlurm` and :class:`LoginSlurm`."""

    #: Where the commands run, for error messages.
    where = "this machine"
    #: True when the agents must hear pings (a connection that can die silently carries them).
    pings = False

    async def spawn(self, argv: Sequence[str]) -> SlurmProcess:
        raise NotImplementedError

    async def run(self, argv: Sequence[str], timeout: float = 30.0) -> str:
        """A command's stdout; ClusterStartError naming the command when it fails."""
        proc = await self.spawn(argv)
        proc.close_stdin()
        try:
            out, err, _ = await asyncio.wait_for(
                asyncio.gather(proc.stdout.read(), proc.stderr.read(), proc.wait()), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            raise ClusterStartError(f"`{' '.join(argv)}` gave no answer within {timeout:.0f} s") from None
        if proc.returncode == 127:
            raise self.not_found(argv[0])
        if proc.returncode != 0:
            raise ClusterStartError(f"`{' '.join(argv)}` failed: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    def not_found(self, name: str) -> ClusterStartError:
        return ClusterStartError(f"{name} was not found on {self.where}: --slurm needs the Slurm client "
                                 "commands (salloc, srun, scontrol, squeue, scancel) there")

    async def forward(self, address: str, port: int) -> tuple[str, int, asyncssh.SSHListener | None]:
        """Where the notebook connects to reach ``address:port`` on a node (and the forward to close)."""
        return address, port, None

    def lost(self) -> str:
        """Why the commands' connection ended ('' if it did not)."""
        return ""

    async def close(self) -> None:
        return None


class LocalSlurm(SlurmShell):
    """Slurm commands on this machine; node addresses reached directly."""

    async def spawn(self, argv: Sequence[str]) -> SlurmProcess:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True, limit=1 << 22)
        except FileNotFoundError:
            raise self.not_found(argv[0]) from None
        return SlurmProcess(process, remote=False)


class LoginSlurm(SlurmShell):
    """Slurm commands on a login node over SSH; node ports forwarded through it.

    Every command is one SSH session; sshd allows MaxSessions (10 by default) per connection, so
    when a connection refuses another session the next one opens (as ``ssh.py`` does per host).
    Port forwards are not sessions: they go through the first connection."""

    pings = True

    def __init__(self, login: str, ssh_config: str | None = None, connect_timeout: float = 10.0) -> None:
        self.login = parse_host(login)
        self.where = f"the login node {self.login.target}"
        self.ssh_config = ssh_config
        self.connect_timeout = connect_timeout
        self._sessions: list[SSHConnection] = []
        self._full: set[asyncssh.SSHClientConnection] = set()
        self._connecting = asyncio.Lock()
        self._closed = False
        self._lost = ""

    async def connection(self) -> asyncssh.SSHClientConnection:
        """An SSH connection to the login node with room for a session; a new one when every one is
        full, or when they were lost (a restart after the network came back)."""
        async with self._connecting:
            if self._closed:
                raise ClusterStartError(f"{self.login.target}: the cluster is stopping")
            for session in [s for s in self._sessions if s.conn.is_closed()]:
                self._lost = self._lost or loss_reason(session.conn, KEEPALIVE_SECONDS)
                log.warning("the SSH connection to %s was lost (%s)", self.login.target, self._lost or "closed")
                self._sessions.remove(session)
                self._full.discard(session.conn)
            if len(self._full) >= MAX_CONNECTIONS:
                self._full.clear()  # sessions on them have ended since; try them again
            for session in self._sessions:
                if session.conn not in self._full:
                    return session.conn
            try:
                session = await open_connection(
                    self.login, connect_timeout=self.connect_timeout, keepalive_interval=KEEPALIVE_INTERVAL,
                    keepalive_count_max=KEEPALIVE_COUNT_MAX, ssh_config=self.ssh_config)
            except SSHConnectError as exc:
                raise ClusterStartError(f"--slurm-login {self.login.target}: {exc}",
                                        host=self.login.target) from None
            self._sessions.append(session)
            return session.conn

    async def spawn(self, argv: Sequence[str]) -> SlurmProcess:
        for _ in range(2 * MAX_CONNECTIONS):
            conn = await self.connection()
            try:
                process = await conn.create_process(shlex.join(argv), encoding=None)
            except asyncssh.ChannelOpenError:
                self._full.add(conn)  # MaxSessions reached on this one
                continue
            except (asyncssh.Error, OSError) as exc:
                raise ClusterStartError(f"{self.where}: could not run {argv[0]} ({exc})",
                                        host=self.login.target) from None
            return SlurmProcess(process, remote=True)
        raise ClusterStartError(f"{self.where} refused more SSH sessions", host=self.login.target)

    async def forward(self, address: str, port: int) -> tuple[str, int, asyncssh.SSHListener | None]:
        await self.connection()
        conn = self._sessions[0].conn
        try:
            listener = await conn.forward_local_port("127.0.0.1", 0, address, port)
        except (asyncssh.Error, OSError) as exc:
            raise ClusterStartError(f"{self.where}: could not forward a port to {address}:{port} ({exc})",
                                    host=self.login.target) from None
        return "127.0.0.1", listener.get_port(), listener

    def lost(self) -> str:
        reasons = [loss_reason(s.conn, KEEPALIVE_SECONDS) for s in self._sessions if s.conn.is_closed()]
        return next((r for r in reasons if r), self._lost)

    async def close(self) -> None:
        async with self._connecting:
            self._closed = True
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        await asyncio.gather(*(s.wait_closed() for s in sessions), return_exceptions=True)
