"""Reading a worker's messages off its sockets at the cost the engine needs, no more.

jupyter_client's channels poll a socket before each receive (two awaits per message) and turn every
header's ISO dates into ``datetime`` objects with dateutil. The engine never reads those dates, and
with N workers each no-op cell brings 3N messages: profiled in the notebook's event-loop thread
(``benchmarks/probes/noop_breakdown.py``, 32 workers), date parsing alone was ~11 % of its time and
``Session.deserialize`` ~20 %. :class:`WorkerClient` receives straight from the socket and checks
the signature exactly as the Jupyter message protocol asks (HMAC over the four packed parts,
no replayed signature), but leaves the dates as the strings they arrived as. All of them share one
ZMQ context (:func:`shared_context`).
"""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.session import Session


def parse(session: Session, frames: list[bytes]) -> dict[str, Any]:
    """One Jupyter message from its frames (after the identities); raises ValueError if forged."""
    if len(frames) < 5:
        raise ValueError(f"malformed message: {len(frames)} frames, at least 5 expected")
    signature = frames[0]
    if session.auth is not None:
        if not signature:
            raise ValueError("unsigned message")
        if signature in session.digest_history:
            raise ValueError(f"replayed signature {signature!r}")
        session._add_digest(signature)  # noqa: SLF001 -- jupyter_client's replay record has no public adder
        if not hmac.compare_digest(signature, session.sign(frames[1:5])):
            raise ValueError(f"invalid signature {signature!r}")
    header = session.unpack(frames[1])
    return {"header": header, "msg_id": header.get("msg_id"), "msg_type": header.get("msg_type"),
            "parent_header": session.unpack(frames[2]), "metadata": session.unpack(frames[3]),
            "content": session.unpack(frames[4]), "buffers": [memoryview(b) for b in frames[5:]]}


_context: zmq.asyncio.Context | None = None


def shared_context() -> zmq.asyncio.Context:
    """One ZMQ context for every worker connection of this process.

    jupyter_client gives each client a context of its own, and each context runs an I/O thread:
    32 workers meant 32 I/O threads in the notebook process, one woken for every message of its
    worker, on a machine whose few cores the workers need. One context has one I/O thread.
    """
    global _context
    if _context is None or _context.closed:
        _context = zmq.asyncio.Context()
    return _context


class WorkerClient(AsyncKernelClient):
    """An :class:`AsyncKernelClient` whose shell and IOPub messages are read by :func:`parse`, on
    the process's :func:`shared_context` (never terminated by a client's ``stop_channels``)."""

    def _context_default(self) -> zmq.asyncio.Context:
        return shared_context()

    async def _receive(self, channel: Any, timeout: float | None) -> dict[str, Any]:
        socket = channel.socket
        if socket is None:
            raise ConnectionError("the channel is closed")
        if timeout is not None:
            frames = await asyncio.wait_for(socket.recv_multipart(), timeout)
        else:
            frames = await socket.recv_multipart()
        _identities, frames = self.session.feed_identities(frames)
        return parse(self.session, frames)

    async def get_shell_msg(self, timeout: float | None = None) -> dict[str, Any]:
        return await self._receive(self.shell_channel, timeout)

    async def get_iopub_msg(self, timeout: float | None = None) -> dict[str, Any]:
        return await self._receive(self.iopub_channel, timeout)
