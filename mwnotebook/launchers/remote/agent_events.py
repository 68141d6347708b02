"""What the SSH and Slurm launchers share about remote agents (``processes/shipped/remote_agent.py``), whatever
carries their channel: an SSH channel (``ssh/agent.py`` ``SSHAgent``) or a Slurm job step's
stdout (``slurm/agent.py`` ``SrunAgent``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, TypedDict, cast

log = logging.getLogger(__name__)


class AgentEvent(TypedDict, total=False):
    """One JSON line from a remote agent or a remote template (``send`` in
    ``processes/shipped/remote_agent.py`` and ``remote_template.py``); which keys come depends on
    ``event``."""

    event: Literal["ports", "ready", "exit", "error", "stacks", "usage"]
    python: str  # every event but exit: the interpreter that runs the agent
    version: str  # ports, error "missing": its Python version
    #: ports: the reserved TCP ports (a list); ready from a kernel: channel name -> port
    ports: Any
    address: str  # ports: the address this host was reached at
    pid: int  # ready: the kernel's or the template's process id
    dir: str  # ready (kernel): its private directory
    forked: bool  # ready (kernel): forked from the host's template
    note: str  # ready (kernel): why the template could not fork it; stacks, usage: why there is none
    socket: str  # ready (template): its unix socket's path
    problem: str  # ready (template): what failed to import ('' when all did)
    tensorflow_imported: bool  # ready (template): remote_template.loaded_state()
    tf_keras_imported: bool
    context_created: bool
    context_initialized: bool
    threads: int | None
    returncode: int | None  # exit
    description: str  # exit: how the kernel ended
    log: str  # exit, error "kernel": the end of the kernel's log
    kind: Literal["missing", "kernel", "protocol"]  # error
    modules: list[str]  # error "missing": modules the interpreter lacks
    detail: str  # error
    text: str  # stacks: faulthandler's dump ('' when none: see note)
    main: int | None  # stacks: the kernel's main thread id
    cpu_seconds: float | None  # usage: the kernel's CPU seconds so far (/proc/PID/stat utime + stime)
    age: float | None  # usage: seconds since the kernel started (its reader makes a share of two readings)
    memory_bytes: int | None  # usage: its resident memory (/proc/PID/statm)
    memory_limit: int | None  # usage: the smallest of MemTotal and its memory cgroup's limits


async def next_agent_event(readline: Callable[[], Awaitable[str | bytes]], host: str) -> AgentEvent | None:
    """The next JSON object the agent wrote, or None when the channel closed. Other lines (a banner
    printed by a login script, stray output) are skipped."""
    while line := await readline():
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict):
            return cast(AgentEvent, event)  # the shape is the agent's; readers check "event"
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
