"""One kernel on a remote host as the SSH, Slurm and Ray launchers see it: reached through port
forwards (or at its node's address), watched and controlled through its agent's channel. One type for
every backend: each tells it, as constructor arguments, where the kernel runs (``target``) and how to
say why it is gone when the channel closed without an exit event (``describe_loss``: the SSH
connection's loss, the Slurm job step's end, the Ray node's or the ``--ray-ssh`` connection's)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from mwnotebook.launchers.remote.agent_channel import AgentRun
from mwnotebook.launchers.remote.agent_events import AgentEvent

__all__ = ["Listener", "RemoteKernelHandle"]

log = logging.getLogger(__name__)

#: On top of the dump's own wait: the ``stacks`` line's way to the host and the answer's way back.
STACKS_TRANSIT_SECONDS = 5.0


class Listener(Protocol):
    """A port forward closed with the kernel (asyncssh's ``SSHListener``)."""

    def close(self) -> None: ...


class RemoteKernelHandle:
    """A kernel on a remote host (see :class:`mwnotebook.launchers.base.KernelHandle`).

    Its pid is a process id on its own host (an SSH host, a Slurm node, a Ray node), never one of
    this machine, even when that host is this machine by another name: the kernel is ended through
    its agent (its channel closing ends it), not by a signal from here.

    ``target`` names the worker's host (an SSH host, a Slurm node, a Ray node's address);
    ``describe_loss()`` says why the kernel is gone when its agent's channel closed without an exit
    event (default: the channel to its agent was lost); ``remote_dir`` is its private directory there."""

    on_this_machine = False

    def __init__(self, index: int, target: str, agent: AgentRun, pid: int, listeners: Iterable[Listener],
                 connection_info: dict[str, Any], *, remote_dir: str = "",
                 describe_loss: Callable[[], str] | None = None) -> None:
        self.index = index
        self.host = target
        self._agent = agent
        self._pid = pid
        self._listeners = list(listeners)
        self._connection_info = connection_info
        self._exit = ""
        self._log_tail = ""
        #: The kernel's private directory on its host (connection file, log); gone after kill().
        self.remote_dir = remote_dir
        self._describe_loss = describe_loss
        self._ended = asyncio.Event()
        #: The ``stacks`` request waiting for its answer (one at a time: ``_asking``).
        self._stacks: asyncio.Future[AgentEvent] | None = None
        self._asking = asyncio.Lock()
        #: The ``usage`` request waiting for its answer (one at a time: ``_asking_usage``).
        self._usage: asyncio.Future[AgentEvent] | None = None
        self._asking_usage = asyncio.Lock()
        self._watch = asyncio.ensure_future(self._watch_agent())

    @property
    def connection_info(self) -> dict[str, Any]:
        return dict(self._connection_info)

    @property
    def pid(self) -> int | None:
        """The kernel's process id on its own host."""
        return self._pid

    async def _watch_agent(self) -> None:
        try:
            while (event := await self._agent.next_event()) is not None:
                if event.get("event") in ("stacks", "usage"):
                    waiting = self._stacks if event.get("event") == "stacks" else self._usage
                    if waiting is not None and not waiting.done():
                        waiting.set_result(event)
                    continue
                if event.get("event") == "exit":
                    self._exit = str(event.get("description", "exited"))
                    self._log_tail = str(event.get("log", ""))
                    break
        except Exception:  # the channel broke: treated like a closed one below
            log.debug("agent channel for worker %d on %s failed", self.index, self.host,
                      exc_info=True)
        finally:
            if not self._exit:
                loss = self._describe_loss
                self._exit = loss() if loss is not None else f"lost the channel to its agent on {self.host}"
            self._ended.set()

    @property
    def ended(self) -> bool:
        """The kernel is gone (its agent reported an exit, or its channel closed)."""
        return self._ended.is_set()

    async def is_alive(self) -> bool:
        return not self._ended.is_set()

    def exit_description(self) -> str:
        return self._exit if self._ended.is_set() else ""

    def log_tail(self, lines: int = 20) -> str:
        """The end of the kernel's own output when it died by itself (empty otherwise)."""
        return "".join(self._log_tail.splitlines(keepends=True)[-lines:])

    async def wait(self) -> None:
        """Until the kernel has ended (for tests and watchers)."""
        await self._ended.wait()

    async def take_stacks(self, timeout: float) -> tuple[str, int | None, str]:
        """The kernel's Python stacks, taken on its host by its agent (the ``stacks`` command of
        ``processes/shipped/remote_agent.py``): ``(text, main thread id, note)``."""
        async with self._asking:
            if self._ended.is_set():
                return "", None, f"the worker process has ended ({self._exit})"
            answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._stacks = answer
            self._agent.send("stacks")
            ended: asyncio.Future[Any] = asyncio.ensure_future(self._ended.wait())
            try:  # the agent waits up to ``timeout`` for the dump; then the way back
                await asyncio.wait({answer, ended}, timeout=timeout + STACKS_TRANSIT_SECONDS,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
                self._stacks = None
            if not answer.done():
                answer.cancel()
                why = "it ended" if self._ended.is_set() else "no answer from its agent"
                return "", None, f"no stacks from the worker's host ({why})"
            event = answer.result()
            main = event.get("main")
            return str(event.get("text", "")), int(main) if main is not None else None, str(event.get("note", ""))

    async def take_usage(self, timeout: float) -> tuple[float | None, float | None, int | None, int | None, str]:
        """The kernel's CPU seconds so far, its age in seconds, resident bytes and memory limit, read
        on its host by its agent (the ``usage`` command of ``processes/shipped/remote_agent.py``):
        ``(cpu_seconds, age, memory_bytes, memory_limit, note)``, None and a note saying why when
        there is no answer. Raw counters: the reader makes a CPU share of two of them (engine/usage.py)."""
        async with self._asking_usage:
            if self._ended.is_set():
                return None, None, None, None, f"the worker process has ended ({self._exit})"
            answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._usage = answer
            self._agent.send("usage")
            try:
                await asyncio.wait_for(asyncio.shield(answer), timeout)
            except asyncio.TimeoutError:
                answer.cancel()
                return None, None, None, None, f"no answer from the agent on {self.host} within {timeout:g} s"
            finally:
                self._usage = None
            event = answer.result()
            cpu, age = event.get("cpu_seconds"), event.get("age")
            memory, limit = event.get("memory_bytes"), event.get("memory_limit")
            return (float(cpu) if cpu is not None else None, float(age) if age is not None else None,
                    int(memory) if memory is not None else None, int(limit) if limit is not None else None,
                    str(event.get("note", "")))

    async def interrupt(self) -> None:
        if not self._ended.is_set():
            self._agent.send("interrupt")

    async def kill(self) -> None:
        if not self._ended.is_set():
            self._agent.send("kill")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._ended.wait()), 5)
        await self._agent.close()  # stdin EOF: the agent kills anything still running
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        if not self._watch.done():
            self._watch.cancel()
        self._ended.set()
        if not self._exit:
            self._exit = "killed"
