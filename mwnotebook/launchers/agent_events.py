"""Reading the remote agent's JSON-lines channel (``entry/remote_agent.py``), whatever carries it: an
SSH channel (``ssh_channel.Agent``) or a Slurm job step's stdout (``slurm.SrunAgent``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
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
