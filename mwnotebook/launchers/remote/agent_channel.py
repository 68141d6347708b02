"""One run of the remote agent (``processes/shipped/remote_agent.py``), whatever carries its
channel: :class:`AgentRun` holds what every run does (send the agent's source, ping it, hand it its
configuration, read its events, say why it ended); an SSH channel (``launchers/ssh/agent.py``) or
a Slurm job step (``launchers/slurm/agent.py``) supplies the transport. Also the sentence that
turns an agent's failure event into a start-up error a user can act on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from mwnotebook.launchers.remote.agent_events import AgentEvent, next_agent_event
from mwnotebook.processes import shipped
from mwnotebook.processes.shipped.remote_agent import BOOTSTRAP

__all__ = ["AGENT_PING_SECONDS", "AGENT_SILENCE_LIMIT", "BOOTSTRAP", "DEFAULT_REQUIRE", "AgentRun", "agent_error"]

log = logging.getLogger(__name__)

#: The launcher writes a ``ping`` line to every agent this often; an agent that hears nothing for
#: AGENT_SILENCE_LIMIT s (a silently dead network, where sshd notices nothing for hours) kills its
#: kernel and exits, so nothing outlives a connection that died without a FIN or RST.
AGENT_PING_SECONDS = 2.0
AGENT_SILENCE_LIMIT = 10.0

#: What a remote host's interpreter must have for a worker (the agent checks before anything starts).
DEFAULT_REQUIRE = ("ipykernel", "tensorflow")

_AGENT_SOURCE = shipped.bundle("remote_agent.py")  # with the helpers it imports


class AgentRun:
    """One run of the remote agent. A subclass sets ``process`` before calling ``__init__`` and
    supplies the transport: :meth:`_write`, :meth:`_readline`, :meth:`_read_stderr`,
    :meth:`_running`, :meth:`_wait`, :meth:`_ended_reason` and :meth:`close`."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._stderr: list[str] = []
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())
        self._ping_task: asyncio.Future[None] | None = None

    # -- the transport ------------------------------------------------------------------------
    def _write(self, text: str) -> None:
        """Write to the agent's stdin; never raises (a closed channel shows in the next event)."""
        raise NotImplementedError

    async def _readline(self) -> str | bytes:
        raise NotImplementedError

    async def _read_stderr(self) -> str:
        """The next chunk of the agent's stderr ('' at its end)."""
        raise NotImplementedError

    def _running(self) -> bool:
        raise NotImplementedError

    async def _wait(self) -> None:
        """Until the agent's process (or channel) has ended."""
        raise NotImplementedError

    def _ended_reason(self, python: str, stderr: str) -> str:
        """A one-line reason for an agent that ended without an event, from its last stderr."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    # -- what every run does --------------------------------------------------------------------
    def _send_source(self, ping: bool) -> None:
        """Send the agent its source (read by ``BOOTSTRAP``); with ``ping``, arm its silence
        watchdog and keep it fed."""
        self._write(f"{len(_AGENT_SOURCE)}\n{_AGENT_SOURCE}")
        if ping:
            self.send(f"ping {AGENT_SILENCE_LIMIT:g}")
            self._ping_task = asyncio.ensure_future(self._ping())

    async def _ping(self) -> None:
        """Tell the agent, every AGENT_PING_SECONDS, that the notebook side is still there."""
        while self._running():
            await asyncio.sleep(AGENT_PING_SECONDS)
            self.send("ping")

    def _stop_pinging(self) -> None:
        if self._ping_task is not None:
            self._ping_task.cancel()

    def configure(self, config: Mapping[str, Any]) -> None:
        """Hand the agent its role and settings (one JSON line: never on a command line).
        If the agent has already ended (no interpreter), its next event says why."""
        self.send(json.dumps(dict(config)))

    def send(self, line: str) -> None:
        self._write(line + "\n")

    async def _drain_stderr(self) -> None:
        with contextlib.suppress(Exception):
            while chunk := await self._read_stderr():
                self._stderr.append(chunk)
                del self._stderr[:-8]

    async def next_event(self) -> AgentEvent | None:
        """The next JSON event, or None when the channel closed."""
        return await next_agent_event(self._readline, self.host)

    async def why_it_ended(self, python: str) -> str:
        """A one-line reason after the agent ended without an event (bad interpreter, crash)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._wait(), 3)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._stderr_task, 1)
        return self._ended_reason(python, "".join(self._stderr).strip())


def agent_error(event: Mapping[str, Any], python: str) -> str:
    if event.get("kind") == "missing":
        modules = ", ".join(event.get("modules", []))
        return (f"Python {event.get('version', '?')} at {event.get('python', python)} lacks {modules}; "
                "install them there (the same environment as the notebook), or point --python "
                "at an interpreter that has them")
    detail = str(event.get("detail", "the remote agent failed"))
    tail = str(event.get("log", "")).strip()
    return f"{detail}" + (f"; kernel log ends with:\n{tail[-1500:]}" if tail else "")
