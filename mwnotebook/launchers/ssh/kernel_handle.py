"""A remote kernel started over SSH: the shared handle (``launchers/remote/kernel_handle.py``)
that, when its channel closes without an exit event, names the SSH connection's loss."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import asyncssh

from mwnotebook.config.hosts import HostSpec
from mwnotebook.launchers.remote.kernel_handle import Listener, RemoteKernelHandle
from mwnotebook.launchers.ssh.agent import SSHAgent
from mwnotebook.launchers.ssh.connect import loss_reason

__all__ = ["SSHKernelHandle"]


class SSHKernelHandle(RemoteKernelHandle):
    """A kernel on a remote host, reached through SSH port forwards (see ``launchers/ssh/launcher.py``)."""

    def __init__(self, index: int, spec: HostSpec, agent: SSHAgent, pid: int,
                 listeners: Iterable[Listener], connection_info: dict[str, Any],
                 conn: asyncssh.SSHClientConnection | None = None, keepalive_seconds: float = 0) -> None:
        self._conn = conn
        self._keepalive_seconds = keepalive_seconds
        super().__init__(index, spec, agent, pid, listeners, connection_info)

    def _lost_description(self) -> str:
        reason = loss_reason(self._conn, self._keepalive_seconds) if self._conn else ""
        return f"lost the SSH connection to {self.host}" + (f": {reason}" if reason else "")
