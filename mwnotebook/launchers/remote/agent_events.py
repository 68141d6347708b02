"""What the SSH and Slurm launchers share about remote agents (``processes/shipped/remote_agent.py``), whatever
carries their channel: an SSH channel (``ssh/agent.py`` ``SSHAgent``) or a Slurm job step's
stdout (``slurm/agent.py`` ``SrunAgent``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)


async def next_agent_event(readline: Callable[[], Awaitable[str | bytes]], host: str) -> dict[str, Any] | None:
    """The next JSON object the agent wrote, or None when the channel closed. Other lines (a banner
    printed by a login script, stray output) are skipped."""
    while line := await readline():
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict):
            return event
        log.debug("unexpected line from the agent on %s: %r", host, line)
    return None


async def gather_port_holders(reservations: Iterable[Awaitable[None]],
                              release: Callable[[], Awaitable[None]]) -> None:
    """Run the per-host port reservations (``ports`` agents) together; when any failed, release
    what the others hold and raise the first error."""
    results = await asyncio.gather(*reservations, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        await release()
        raise errors[0]
