"""A kernel's start through a remote agent, written once for every backend whose agent runs
``processes/shipped/remote_agent.py`` (SSH hosts, Slurm job steps, Ray bundles): hand the agent its ``kernel``
configuration (forked from the host's template when there is one), wait for ``ready``, and make
the kernel's five ZMQ ports reachable from the notebook (an SSH forward, or the node's own address).

What differs per backend comes in as arguments: where the kernel is (for messages), the address it
binds, how the first event is awaited (a backend explains an ended agent in its own words: a Slurm
job that ended, say) and how one port is reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.remote.agent_channel import agent_error
from mwnotebook.launchers.remote.agent_events import AgentEvent
from mwnotebook.launchers.remote.kernel_handle import Listener
from mwnotebook.launchers.remote.template_pool import RemoteTemplate, check_fork, with_template

#: The kernel's ZMQ channels, as its ``ready`` event and jupyter_client's connection info name them.
KERNEL_CHANNELS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
SIGNATURE_SCHEME = "hmac-sha256"
#: SSH keepalive (to SSH hosts, and to a Slurm login node): one every KEEPALIVE_INTERVAL s of
#: silence, the connection is dropped after KEEPALIVE_COUNT_MAX unanswered ones: a silently dead
#: network is noticed after 2 * (3 + 1) = 8 s (KEEPALIVE_SECONDS), so that the cell fails within
#: 15 s naming the host.
KEEPALIVE_INTERVAL = 2.0
KEEPALIVE_COUNT_MAX = 3
KEEPALIVE_SECONDS = KEEPALIVE_INTERVAL * (KEEPALIVE_COUNT_MAX + 1)


class StartingAgent(Protocol):
    """The agent a kernel starts through (``ssh/agent.py`` ``SSHAgent``, ``slurm/agent.py`` ``SrunAgent``,
    ``ray/channel.py`` ``RelayAgent``)."""

    def configure(self, config: Mapping[str, Any]) -> None: ...

    async def next_event(self) -> AgentEvent | None: ...

    async def why_it_ended(self, python: str) -> str: ...

    async def close(self) -> None: ...


#: ``forward(port)``: where the notebook reaches the kernel's ``port``: ``(ip, port, listener)``,
#: the listener None when nothing is forwarded.
Forward = Callable[[int], Awaitable[tuple[str, int, Listener | None]]]


async def first_event(agent: StartingAgent, where: str, timeout: float, python: str, *,
                      silent: str = "the remote agent",
                      explain_end: Callable[[str], Awaitable[str]] | None = None) -> AgentEvent:
    """The agent's first event; :class:`ClusterStartError` naming ``where`` when the agent says
    nothing within ``timeout`` (``silent`` names who stayed silent), ends (``explain_end`` may
    replace the reason its stderr gave) or reports an error. The agent is closed on each of them."""
    try:
        event = await asyncio.wait_for(agent.next_event(), timeout)
    except asyncio.TimeoutError:
        await agent.close()
        raise ClusterStartError(f"{where}: no answer from {silent} within {timeout:.0f} s", host=where) from None
    if event is None:
        reason = await agent.why_it_ended(python)
        await agent.close()
        if explain_end is not None:
            reason = await explain_end(reason)
        raise ClusterStartError(f"{where}: {reason}", host=where)
    if event.get("event") == "error":
        await agent.close()
        raise ClusterStartError(f"{where}: {agent_error(event, python)}", host=where)
    return event


@dataclass
class StartedKernel:
    """A kernel the agent reported ready: its ``ready`` event, the connection info the notebook
    uses, and the forwards to close with it."""

    event: AgentEvent
    info: dict[str, Any]
    listeners: list[Listener] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return int(self.event["pid"])

    @property
    def remote_dir(self) -> str:
        return str(self.event.get("dir", ""))


async def start_kernel(agent: StartingAgent, *, where: str, key: str, env: Mapping[str, str],
                       require: Sequence[str], cwd: str | None, timeout: float,
                       template: RemoteTemplate | None, wait: Callable[[float], Awaitable[AgentEvent]],
                       forward: Forward, bind_ip: str | None = None) -> StartedKernel:
    """Start a kernel through ``agent`` (see the module docstring).

    ``bind_ip``: the address the kernel binds (None: the agent's default, 127.0.0.1, reached
    through forwards); ``wait(seconds)``: the agent's first event (:func:`first_event` with the
    backend's words). On any failure the forwards made so far are closed and the agent too, then
    the exception goes on (the caller may translate a transport error).
    """
    config: dict[str, Any] = {"role": "kernel", "key": key, "signature_scheme": SIGNATURE_SCHEME}
    if bind_ip is not None:
        config["ip"] = bind_ip
    config.update({"env": dict(env), "require": list(require), "cwd": cwd, "timeout": timeout})
    listeners: list[Listener] = []
    info: dict[str, Any] = {"ip": bind_ip or "127.0.0.1", "transport": "tcp", "key": key,
                            "signature_scheme": SIGNATURE_SCHEME, "kernel_name": ""}
    try:
        agent.configure(await with_template(config, template))
        event = await wait(timeout + 5)
        if event.get("event") != "ready":
            raise ClusterStartError(f"{where}: unexpected agent reply {event.get('event')!r}", host=where)
        check_fork(template, event)
        for name in KERNEL_CHANNELS:
            info["ip"], info[name], listener = await forward(int(event["ports"][name]))
            if listener is not None:
                listeners.append(listener)
    except BaseException:
        for listener in listeners:
            listener.close()
        await agent.close()
        raise
    return StartedKernel(event, info, listeners)
