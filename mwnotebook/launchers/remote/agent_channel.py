"""The SSH side of one remote agent run (see ``processes/shipped/remote_agent.py``), and the sentences that turn SSH
and agent failures into start-up errors a user can act on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
from collections.abc import Mapping
from typing import Any

import asyncssh

from mwnotebook.launchers.remote.agent_events import next_agent_event
from mwnotebook.processes import shipped
from mwnotebook.processes.shipped.remote_agent import BOOTSTRAP

log = logging.getLogger(__name__)

#: The launcher writes a ``ping`` line to every agent this often; an agent that hears nothing for
#: AGENT_SILENCE_LIMIT s (a silently dead network, where sshd notices nothing for hours) kills its
#: kernel and exits, so nothing outlives a connection that died without a FIN or RST.
AGENT_PING_SECONDS = 2.0
AGENT_SILENCE_LIMIT = 10.0

_AGENT_SOURCE = shipped.bundle("remote_agent.py")  # with the helpers it imports


class Agent:
    """One run of the remote agent on an SSH channel."""

    def __init__(self, process: asyncssh.SSHClientProcess, host: str) -> None:
        self.process = process
        self.host = host
        self._stderr: list[str] = []
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self._ping_task = asyncio.ensure_future(self._ping())

    @classmethod
    async def start(cls, conn: asyncssh.SSHClientConnection, host: str, python: str) -> Agent:
        """Run the agent, which then waits for :meth:`configure`; raises
        ``asyncssh.ChannelOpenError`` when the connection has no room for another session."""
        command = f"exec {shlex.quote(python)} -u -c {shlex.quote(BOOTSTRAP)}"
        process = await conn.create_process(command, encoding="utf-8")
        agent = cls(process, host)
        process.stdin.write(f"{len(_AGENT_SOURCE)}\n{_AGENT_SOURCE}ping {AGENT_SILENCE_LIMIT:g}\n")
        return agent

    async def _ping(self) -> None:
        """Tell the agent, every AGENT_PING_SECONDS, that the notebook side is still there."""
        while not self.process.is_closing():
            await asyncio.sleep(AGENT_PING_SECONDS)
            self.send("ping")

    def configure(self, config: Mapping[str, Any]) -> None:
        """Hand the agent its role and settings (one JSON line: never on a command line).
        If the agent has already ended (no interpreter), its next event says why."""
        self.send(json.dumps(dict(config)))

    @property
    def usable(self) -> bool:
        """Still running and not yet configured (a spare started ahead of time)."""
        return not self.process.is_closing() and self.process.exit_status is None

    async def _drain_stderr(self) -> None:
        with contextlib.suppress(Exception):
            while chunk := await self.process.stderr.read(4096):
                self._stderr.append(chunk)
                del self._stderr[:-8]

    async def next_event(self) -> dict[str, Any] | None:
        """The next JSON event, or None when the channel closed."""
        return await next_agent_event(self.process.stdout.readline, self.host)

    def send(self, line: str) -> None:
        with contextlib.suppress(Exception):
            self.process.stdin.write(line + "\n")

    async def why_it_ended(self, python: str) -> str:
        """A one-line reason after the agent ended without an event (bad interpreter, crash)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.process.wait_closed(), 3)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._stderr_task, 1)
        status = self.process.exit_status
        stderr = "".join(self._stderr).strip()
        if status == 127:
            return (f"Python interpreter {python!r} was not found on the host; pass --python "
                    "with the path of the interpreter that has ipykernel and tensorflow")
        if status == 126:
            return f"{python!r} on the host is not executable"
        last = stderr.splitlines()[-1] if stderr else ""
        return f"the remote agent ended (exit status {status}){': ' + last if last else ''}"

    async def close(self) -> None:
        self._ping_task.cancel()
        with contextlib.suppress(Exception):
            self.process.stdin.write_eof()
        with contextlib.suppress(Exception):
            self.process.close()
            await asyncio.wait_for(self.process.wait_closed(), 3)
        self._stderr_task.cancel()


def agent_error(event: Mapping[str, Any], python: str) -> str:
    if event.get("kind") == "missing":
        modules = ", ".join(event.get("modules", []))
        return (f"Python {event.get('version', '?')} at {event.get('python', python)} lacks {modules}; "
                "install them there (the same environment as the notebook), or point --python "
                "at an interpreter that has them")
    detail = str(event.get("detail", "the remote agent failed"))
    tail = str(event.get("log", "")).strip()
    return f"{detail}" + (f"; kernel log ends with:\n{tail[-1500:]}" if tail else "")
