"""One run of the remote agent in a Ray bundle: a TCP connection to the bundle's relay actor
(``node_relay.py``), which made that connection the agent's stdin and stdout; what every agent run
does is in ``launchers/remote/agent_channel.py``.

The connection alone would not notice a node that vanished without closing its sockets (a machine
switched off); the relay's ``wait`` call does: Ray fails it when the actor dies, and then the
channel is closed here, so the kernel's handle sees its agent gone at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from typing import Any

from mwnotebook.launchers.ray.node_relay import CHANNEL_CHARS
from mwnotebook.launchers.remote.agent_channel import AgentRun

__all__ = ["RelayAgent"]

log = logging.getLogger(__name__)

#: How long the relay's node may take to answer the connection (it is on the cluster's network).
CONNECT_SECONDS = 10.0


class RelayAgent(AgentRun):
    """One agent started by a relay actor; ``ended`` is the relay's ``wait`` for it, as a future."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, node: str,
                 ended: asyncio.Future[Any], kill: Callable[[], None],
                 connected: Callable[[], bool] = lambda: True) -> None:
        self.process = writer
        self._reader = reader
        self._writer = writer
        self._ended = ended
        self._kill = kill
        self._connected = connected
        self._result: tuple[int | None, str] | None = None
        self._ended.add_done_callback(self._on_end)
        super().__init__(node)

    @classmethod
    async def start(cls, where: dict[str, Any], token: str, relay: Any, node: str,
                    wrap: Callable[[Any], asyncio.Future[Any]],
                    address: tuple[str, int] | None = None,
                    connected: Callable[[], bool] = lambda: True) -> RelayAgent:
        """Connect to the relay at ``where`` (its :meth:`NodeRelay.where`), or at ``address`` (a
        local SSH forward to it, ``ssh_jump.py``), start an agent there and send it its source.
        ``relay`` is the actor handle; ``wrap`` turns a Ray call into a future; ``connected``: Ray is
        still connected (a call to Ray without its connection would start a new local Ray: Ray's
        auto-init)."""
        channel = secrets.token_hex(CHANNEL_CHARS // 2)
        ip, port = address or (str(where["ip"]), int(where["port"]))
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), CONNECT_SECONDS)
        except (OSError, asyncio.TimeoutError) as exc:
            hint = ("through its SSH forward" if address else
                    "the notebook must be on the Ray cluster's network, or give --ray-ssh HEAD_HOST")
            raise ConnectionError(f"cannot reach the relay on {node} at {where['ip']}:{where['port']} "
                                  f"({exc or 'timed out'}); {hint}") from None
        writer.write(f"{token} {channel}\n".encode())
        ended = wrap(relay.wait.remote(channel))
        agent = cls(reader, writer, node, ended, lambda: relay.kill.remote(channel), connected)
        agent._send_source(ping=True)
        return agent

    def _on_end(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            self._result = (None, f"its Ray actor is gone ({type(exc).__name__})")
        else:
            code, tail = future.result()
            self._result = (code, str(tail))
        self._writer.close()  # a vanished node: the reader ends now, not at a TCP timeout

    def _write(self, text: str) -> None:
        if not self._writer.is_closing():
            self._writer.write(text.encode())

    async def _readline(self) -> bytes:
        try:
            return await self._reader.readline()
        except (ConnectionError, OSError):
            return b""

    async def _read_stderr(self) -> str:
        return ""  # the agent's stderr is a file on its node; the relay's wait() returns its end

    def _running(self) -> bool:
        return not self._ended.done() and not self._writer.is_closing()

    async def _wait(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(self._ended)

    def _ended_reason(self, python: str, stderr: str) -> str:
        code, tail = self._result or (None, "")
        lines = [line for line in tail.splitlines() if line.strip()]
        detail = f": {lines[-1].strip()}" if lines else ""
        if code is None:
            return f"the agent on {self.host} ended{detail or ' (' + (tail or 'no reason') + ')'}"
        return f"the agent on {self.host} ended (exit status {code}){detail}"

    async def close(self) -> None:
        """Close the connection (the agent kills its kernel and exits); after 5 s, kill it."""
        self._stop_pinging()
        if not self._writer.is_closing():
            self._writer.close()
        if self._connected():  # else no word from Ray will come; the agent ends with its closed stdin
            try:
                await asyncio.wait_for(asyncio.shield(self._ended), 5)
            except asyncio.TimeoutError:
                if self._connected():
                    with contextlib.suppress(Exception):
                        self._kill()
            except Exception:  # the actor is gone: so is the agent
                pass
        self._stderr_task.cancel()
