"""One worker connection: a started kernel (any launcher) plus the jupyter_client connection to it.

Messages are read straight off the ZMQ sockets with no polling interval, so a cell's output and
its completion reach the notebook as soon as the kernel sends them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jupyter_client.asynchronous import AsyncKernelClient

from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.base import KernelHandle

log = logging.getLogger(__name__)

MessageCallback = Callable[[dict[str, Any]], None]

#: IOPub message types that carry cell output.
OUTPUT_TYPES = frozenset({"stream", "display_data", "update_display_data", "execute_result", "error",
                          "clear_output"})


@dataclass
class ExecutionOutcome:
    """How one worker's execution of a cell ended."""

    status: str  # "ok" | "error" | "aborted"
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    seconds: float = 0.0
    user_expressions: dict[str, Any] = field(default_factory=dict)

    def expression(self, name: str) -> str | None:
        """The text/plain value of a user expression that evaluated without error."""
        value = self.user_expressions.get(name) or {}
        return value.get("data", {}).get("text/plain") if value.get("status") == "ok" else None


class Worker:
    """A worker kernel and its client. Not thread-safe: used from the cluster's event loop only."""

    def __init__(self, handle: KernelHandle, env: dict[str, str]) -> None:
        self.handle = handle
        self.env = env
        self.client = AsyncKernelClient()
        self.client.load_connection_info(handle.connection_info)
        # One request at a time: concurrent readers of the same ZMQ sockets would steal each
        # other's messages.
        self._busy = asyncio.Lock()

    @property
    def index(self) -> int:
        return self.handle.index

    async def connect(self, timeout: float) -> None:
        """Open the channels and wait until the kernel answers on shell and IOPub; fail fast if it dies.

        jupyter_client's ``wait_for_ready`` judges liveness by heartbeats when no manager owns the
        kernel, which misfires while a loaded machine is still starting the kernel; the process
        handle is the truth here.
        """
        # No heartbeat channel: liveness comes from the process handle, and jupyter_client's heartbeat
        # thread, when a start fails fast, creates its socket after the client was torn down.
        self.client.start_channels(hb=False)
        deadline = time.monotonic() + timeout
        while True:
            if not await self.handle.is_alive():
                raise ClusterStartError(
                    f"worker {self.index} on {self.handle.host} exited during start-up "
                    f"({self.handle.exit_description()}).{self._log_hint()}", worker=self.index,
                    host=self.handle.host)
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"worker {self.index} on {self.handle.host} did not become ready within "
                    f"{timeout:.0f} s.{self._log_hint()}", worker=self.index, host=self.handle.host)
            if await self._answers_kernel_info():
                return

    async def _answers_kernel_info(self) -> bool:
        """One kernel_info round trip, plus proof that IOPub is subscribed (its busy/idle arrive)."""
        msg_id = self.client.kernel_info()
        try:
            reply = await self._reply_for(msg_id, "kernel_info_reply", timeout=1.0)
        except asyncio.TimeoutError:
            return False
        if reply is None:
            return False
        try:
            await asyncio.wait_for(self.client.get_iopub_msg(), timeout=0.5)
        except asyncio.TimeoutError:
            return False
        return True

    def _log_hint(self) -> str:
        tail = getattr(self.handle, "log_tail", lambda: "")()
        return f"\nIts log ends with:\n{tail}" if tail else ""

    async def execute(self, code: str, on_output: MessageCallback, silent: bool = False,
                      user_expressions: dict[str, str] | None = None) -> ExecutionOutcome:
        """Run ``code``; call ``on_output`` with each output message; return when the kernel is idle.

        Completion needs both the execute_reply and IOPub's ``idle`` for this request, so that every
        output has been relayed before the outcome is returned.
        """
        async with self._busy:
            return await self._execute(code, on_output, silent, user_expressions or {})

    async def _execute(self, code: str, on_output: MessageCallback, silent: bool,
                       user_expressions: dict[str, str]) -> ExecutionOutcome:
        started = time.monotonic()
        msg_id = self.client.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                                     stop_on_error=False, user_expressions=user_expressions)
        reply_task = asyncio.ensure_future(self._reply_for(msg_id, "execute_reply"))
        try:
            while True:
                msg = await self.client.get_iopub_msg()
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                msg_type = msg["msg_type"]
                if msg_type == "status" and msg["content"].get("execution_state") == "idle":
                    break
                if msg_type in OUTPUT_TYPES:
                    on_output(msg)
            reply = await reply_task
        finally:
            if not reply_task.done():
                reply_task.cancel()
        content = reply["content"]
        return ExecutionOutcome(
            status=content.get("status", "error"), ename=content.get("ename", ""),
            evalue=content.get("evalue", ""), traceback=list(content.get("traceback", [])),
            seconds=time.monotonic() - started, user_expressions=dict(content.get("user_expressions") or {}))

    async def _reply_for(self, msg_id: str, msg_type: str, timeout: float | None = None) -> dict[str, Any]:
        async def wait() -> dict[str, Any]:
            while True:
                msg = await self.client.get_shell_msg()
                if msg.get("parent_header", {}).get("msg_id") == msg_id and msg["msg_type"] == msg_type:
                    return msg
        return await asyncio.wait_for(wait(), timeout) if timeout is not None else await wait()

    async def shutdown(self, grace: float = 1.0) -> None:
        """Ask the kernel to exit, then kill it if it has not within ``grace`` seconds."""
        if await self.handle.is_alive():
            try:
                self.client.shutdown()
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline and await self.handle.is_alive():
                    await asyncio.sleep(0.05)
            except Exception:  # a broken channel must not stop the kill below
                log.debug("polite shutdown of worker %d failed", self.index, exc_info=True)
        await self.kill()

    async def kill(self) -> None:
        self.client.stop_channels()
        await self.handle.kill()
