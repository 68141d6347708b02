"""The remote agent on an SSH channel (``exec PYTHON -u -c BOOTSTRAP`` in an SSH session); what
every agent run does is in ``launchers/remote/agent_channel.py``."""

from __future__ import annotations

import asyncio
import contextlib
import shlex

import asyncssh

from mwnotebook.launchers.remote.agent_channel import BOOTSTRAP, AgentRun

__all__ = ["SSHAgent"]


class SSHAgent(AgentRun):
    """One run of the remote agent on an SSH channel."""

    def __init__(self, process: asyncssh.SSHClientProcess[str], host: str) -> None:
        self.process = process
        super().__init__(host)

    @classmethod
    async def start(cls, conn: asyncssh.SSHClientConnection, host: str, python: str) -> SSHAgent:
        """Run the agent, which then waits for :meth:`configure`; raises
        ``asyncssh.ChannelOpenError`` when the connection has no room for another session."""
        command = f"exec {shlex.quote(python)} -u -c {shlex.quote(BOOTSTRAP)}"
        process = await conn.create_process(command, encoding="utf-8")
        agent = cls(process, host)
        agent._send_source(ping=True)
        return agent

    @property
    def usable(self) -> bool:
        """Still running and not yet configured (a spare started ahead of time)."""
        return not self.process.is_closing() and self.process.exit_status is None

    def _write(self, text: str) -> None:
        with contextlib.suppress(Exception):
            self.process.stdin.write(text)

    async def _readline(self) -> str:
        line: str = await self.process.stdout.readline()
        return line

    async def _read_stderr(self) -> str:
        chunk: str = await self.process.stderr.read(4096)
        return chunk

    def _running(self) -> bool:
        return not self.process.is_closing()

    async def _wait(self) -> None:
        await self.process.wait_closed()

    def _ended_reason(self, python: str, stderr: str) -> str:
        status = self.process.exit_status
        if status == 127:
            return (f"Python interpreter {python!r} was not found on the host; pass --python "
                    "with the path of the interpreter that has ipykernel and tensorflow")
        if status == 126:
            return f"{python!r} on the host is not executable"
        last = stderr.splitlines()[-1] if stderr else ""
        return f"the remote agent ended (exit status {status}){': ' + last if last else ''}"

    async def close(self) -> None:
        self._stop_pinging()
        with contextlib.suppress(Exception):
            self.process.stdin.write_eof()
        with contextlib.suppress(Exception):
            self.process.close()
            await asyncio.wait_for(self.process.wait_closed(), 3)
        self._stderr_task.cancel()
