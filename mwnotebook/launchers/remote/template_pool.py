"""Worker templates on remote hosts and Slurm nodes, seen from the notebook.

One template per place (host or node) and start-up environment
(:func:`~mwnotebook.launchers.local.template_pool.startup_key`,
as for local workers) for the life of the launcher: the remote agent in its ``template`` role
(``processes/shipped/remote_agent.py`` running ``processes/shipped/remote_template.py``, both stdlib only: nothing of
mwnotebook needs to be installed there). A worker's own agent is then configured with the template's
socket path and gets its kernel forked instead of started; everything else about the worker (its
channels, their forwarding, its agent's clean-up) is as before.

If a template can't start, or dies, workers at that place start as fresh interpreters, with a
one-line notice (logged once per template).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol

from mwnotebook.launchers.local.template_pool import READY_TIMEOUT, startup_key, template_env
from mwnotebook.launchers.remote.agent_events import AgentEvent
from mwnotebook.processes import shipped

log = logging.getLogger(__name__)

TEMPLATE_SOURCE = shipped.bundle("remote_template.py")  # with the helpers it imports


class AgentChannel(Protocol):
    """What a template needs of an agent run (an SSH channel's or an ``srun`` step's)."""

    def configure(self, config: Mapping[str, Any]) -> None: ...

    async def next_event(self) -> AgentEvent | None: ...

    async def close(self) -> None: ...


class RemoteTemplate:
    """One template agent: started in the background, watched until its channel closes."""

    def __init__(self, place: str, start_agent: Callable[[], Awaitable[AgentChannel]],
                 config: Mapping[str, Any], timeout: float) -> None:
        self.place = place
        #: The template's socket on its host ('' until ready, and after it ended).
        self.socket = ""
        self.pid: int | None = None
        #: Why it can't serve ('' while it can).
        self.problem = ""
        self._agent: AgentChannel | None = None
        self._ready = asyncio.Event()
        self._task = asyncio.ensure_future(self._run(start_agent, dict(config), timeout))

    async def _run(self, start_agent: Callable[[], Awaitable[AgentChannel]], config: dict[str, Any],
                   timeout: float) -> None:
        try:
            self._agent = await start_agent()
            self._agent.configure(config)
            event = await asyncio.wait_for(self._agent.next_event(), timeout)
            if event is None or event.get("event") != "ready":
                detail = (event or {}).get("modules") or (event or {}).get("detail") or "it ended"
                self._give_up(f"it did not start ({detail})")
                return
            self.socket, self.pid = str(event["socket"]), int(event["pid"])
            if event.get("context_created"):  # never expected: forking after that is unsafe
                self._give_up("it created a TensorFlow context while loading")
                return
            log.debug("worker template %s on %s ready", self.pid, self.place)
            self._ready.set()
            while await self._agent.next_event() is not None:
                pass
            self._give_up(f"it ended (pid {self.pid})")
        except asyncio.TimeoutError:
            self._give_up(f"it did not import TensorFlow within {timeout:.0f} s")
        except Exception as exc:  # no session, a broken channel: fresh workers instead
            self._give_up(f"{type(exc).__name__}: {exc}")
        finally:
            self._ready.set()

    def _give_up(self, why: str) -> None:
        if not self.problem:
            self.problem = why
            self.socket = ""
            if not self._closing:
                log.warning("mwnotebook: no worker template on %s (%s); its workers start as fresh "
                            "interpreters", self.place, why)

    _closing = False

    def failed_to_fork(self, note: str) -> None:
        """A worker's agent could not use the template: stop offering it."""
        self._give_up(note)

    async def socket_path(self) -> str:
        """The socket to name in a worker's configuration, once ready; '' when it can't serve."""
        await self._ready.wait()
        return self.socket

    async def close(self) -> None:
        self._closing = True
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task
        if self._agent is not None:
            await self._agent.close()  # stdin EOF: the template exits; its kernels belong to their agents


class RemoteTemplates:
    """The templates of one launcher, keyed by place and start-up environment."""

    def __init__(self, python: str, require: Sequence[str], cwd: str | None,
                 timeout: float = READY_TIMEOUT) -> None:
        self.python = python
        self.require = list(require)
        self.cwd = cwd
        self.timeout = timeout
        self._templates: dict[tuple[Hashable, tuple[Any, ...]], RemoteTemplate] = {}

    def get(self, place_key: Hashable, place: str, env: Mapping[str, str],
            start_agent: Callable[[], Awaitable[AgentChannel]]) -> RemoteTemplate:
        """The template for workers with ``env`` at this place; started (in the background) if new."""
        key = (place_key, startup_key(self.python, False, env))
        template = self._templates.get(key)
        if template is None:
            # What the workers need, loaded once: TensorFlow (and tf_keras, where the environment
            # asks for it) when the launcher requires TensorFlow; the kernel's modules always.
            preload = ["tensorflow", "tf_keras"] if "tensorflow" in self.require else []
            config = {"role": "template", "source": TEMPLATE_SOURCE, "env": template_env(env),
                      "require": self.require, "cwd": self.cwd, "preload": preload}
            template = self._templates[key] = RemoteTemplate(place, start_agent, config, self.timeout)
        return template

    def templates(self) -> list[RemoteTemplate]:
        return list(self._templates.values())

    async def close(self) -> None:
        templates, self._templates = list(self._templates.values()), {}
        await asyncio.gather(*(t.close() for t in templates), return_exceptions=True)


async def with_template(config: dict[str, Any], template: RemoteTemplate | None) -> dict[str, Any]:
    """A worker agent's ``kernel`` configuration, naming the template's socket when it can serve."""
    if template is not None and (path := await template.socket_path()):
        config["template"] = path
    return config


def check_fork(template: RemoteTemplate | None, ready: Mapping[str, Any]) -> None:
    """After a worker agent's ``ready``: its note (the template could not fork) retires the template."""
    if template is not None and ready.get("note"):
        template.failed_to_fork(str(ready["note"]))
