"""Where the Slurm client commands (salloc, srun, squeue, scontrol, scancel) run, and how a kernel on a
node is reached from the notebook:

* :class:`LocalSlurm`: on this machine, which is on the cluster's network (a login node, a JupyterHub
  or Open OnDemand session, inside an allocation): kernels are reached at their node's address.
* :class:`LoginSlurm` (``--slurm-login HOST``): on a login node over one SSH host link
  (``launchers/ssh/host_link.py``: the user's SSH config as for ``--hosts``, ProxyJump included; another
  connection when sshd's MaxSessions refuses a session, a new one after a loss). The notebook (a laptop, a workstation)
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
from mwnotebook.launchers.remote.kernel_start import KEEPALIVE_COUNT_MAX, KEEPALIVE_INTERVAL
from mwnotebook.launchers.ssh.host_link import HostLink, LinkSettings

__all__ = ["LocalSlurm", "LoginSlurm", "SlurmProcess", "SlurmShell"]

log = logging.getLogger(__name__)


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

    Every command is one SSH session on the login node's link (``launchers/ssh/host_link.py``: a
    refused session, sshd's MaxSessions, goes to another connection; a lost connection is replaced
    by the next command, with no reconnect window: a status query must not wait for a dead network).
    Port forwards are not sessions."""

    pings = True

    def __init__(self, login: str, ssh_config: str | None = None, connect_timeout: float = 10.0) -> None:
        self.login = parse_host(login)
        self.where = f"the login node {self.login.target}"
        self.link = HostLink(self.login, LinkSettings(connect_timeout, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT_MAX,
                                                      ssh_config), name=f"--slurm-login {self.login.target}")

    async def spawn(self, argv: Sequence[str]) -> SlurmProcess:
        async def run(conn: asyncssh.SSHClientConnection) -> asyncssh.SSHClientProcess[bytes]:
            return await conn.create_process(shlex.join(argv), encoding=None)

        try:
            _, process = await self.link.session(run)
        except (asyncssh.Error, OSError) as exc:
            raise ClusterStartError(f"{self.where}: could not run {argv[0]} ({exc})",
                                    host=self.login.target) from None
        return SlurmProcess(process, remote=True)

    async def forward(self, address: str, port: int) -> tuple[str, int, asyncssh.SSHListener | None]:
        return await self.link.forward(address, port)

    def lost(self) -> str:
        return self.link.lost()

    async def close(self) -> None:
        await self.link.close()
