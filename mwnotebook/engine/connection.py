"""One worker connection: a started kernel (any launcher) plus the jupyter_client connection to it.

Messages are read straight off the ZMQ sockets with no polling interval, so a cell's output and
its completion reach the notebook as soon as the kernel sends them.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import os
import tempfile
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
    #: False when this worker's output did not all arrive (see ``lost_chars``, ``log_path``).
    output_complete: bool = True
    #: Characters the worker wrote per stream that never reached the notebook.
    lost_chars: dict[str, int] = field(default_factory=dict)
    #: The per-worker file holding every stream output this worker's cells sent.
    log_path: str = ""

    def expression(self, name: str) -> str | None:
        """The text/plain value of a user expression that evaluated without error."""
        value = self.user_expressions.get(name) or {}
        return value.get("data", {}).get("text/plain") if value.get("status") == "ok" else None


#: After the execute_reply, how long IOPub may stay silent before the rest of the output is given up
#: (a lost ``idle`` status must not hold the cell forever).
DRAIN_QUIET_SECONDS = 3.0
#: After ``idle``, how long the execute_reply may take before it is counted as lost.
REPLY_AFTER_IDLE_SECONDS = 10.0
#: The user expression through which a worker reports how much it wrote (mwnotebook/launchers/entry/runtime/output.py).
OUTPUT_COUNT_KEY = "_mw_output_written"
OUTPUT_COUNT_EXPRESSION = "__import__('mwnotebook.launchers.entry.runtime.output', fromlist=['written']).written()"


def output_log_dir() -> str:
    """Where this notebook process keeps its workers' output logs (one file per worker index)."""
    path = os.path.join(tempfile.gettempdir(), f"mwnotebook-output-{os.getuid()}-{os.getpid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


class _OutputTally:
    """Counts the stream characters that arrived for one request, and appends them to the log."""

    def __init__(self, log_path: str | None) -> None:
        self.received: dict[str, int] = {}
        self._file = open(log_path, "a", encoding="utf-8") if log_path else None

    def add(self, msg: dict[str, Any]) -> None:
        if msg["msg_type"] != "stream":
            return
        name = msg["content"].get("name", "stdout")
        text = msg["content"].get("text", "")
        self.received[name] = self.received.get(name, 0) + len(text)
        if self._file is not None:
            self._file.write(text)

    def lost(self, expression: dict[str, Any] | None) -> dict[str, int]:
        """Per stream, characters the worker wrote that did not arrive ({} if it cannot say)."""
        if not expression or expression.get("status") != "ok":
            return {}
        try:
            written = ast.literal_eval(expression.get("data", {}).get("text/plain", "{}"))
        except (ValueError, SyntaxError):
            return {}
        return {name: count - self.received.get(name, 0) for name, count in written.items()
                if count > self.received.get(name, 0)}

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


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
        self.output_log = os.path.join(output_log_dir(), f"worker-{handle.index}.log")

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
        """Run ``code``; call ``on_output`` with each output message; return when the run has ended.

        The execute_reply ends the run. IOPub is then drained until this request's ``idle`` (all
        output relayed), but only while messages keep coming: a lost ``idle`` cannot hold the cell
        (the outcome then says ``output_complete=False``). Non-silent runs also append their stream
        output to :attr:`output_log` and compare what arrived with what the worker wrote.
        """
        async with self._busy:
            return await self._execute(code, on_output, silent, user_expressions or {})

    async def _execute(self, code: str, on_output: MessageCallback, silent: bool,
                       user_expressions: dict[str, str]) -> ExecutionOutcome:
        started = time.monotonic()
        if not silent:
            user_expressions = {**user_expressions, OUTPUT_COUNT_KEY: OUTPUT_COUNT_EXPRESSION}
        msg_id = self.client.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                                     stop_on_error=False, user_expressions=user_expressions)
        tally = _OutputTally(self.output_log if not silent else None)
        last_message = [time.monotonic()]

        def relay(msg: dict[str, Any]) -> None:
            tally.add(msg)
            on_output(msg)

        pump = asyncio.ensure_future(self._pump_iopub(msg_id, relay, last_message))
        reply_task = asyncio.ensure_future(self._reply_for(msg_id, "execute_reply"))
        try:
            reply = await self._await_reply(reply_task, pump)
            last_message[0] = max(last_message[0], time.monotonic())  # the drain's quiet time starts now
            complete = await self._drain(pump, last_message)
        finally:
            for task in (pump, reply_task):
                if not task.done():
                    task.cancel()
            tally.close()
        if reply is None:
            return ExecutionOutcome(
                status="error", ename="ReplyLost",
                evalue=f"worker {self.index} went idle but its execute_reply never arrived "
                       f"(waited {REPLY_AFTER_IDLE_SECONDS:.0f} s)", seconds=time.monotonic() - started,
                output_complete=complete, log_path=self.output_log)
        content = reply["content"]
        expressions = dict(content.get("user_expressions") or {})
        lost = tally.lost(expressions.pop(OUTPUT_COUNT_KEY, None))
        if lost or not complete:
            log.warning("worker %d: output lost %s (idle seen: %s); the worker's own count is the truth",
                        self.index, lost, complete)
        return ExecutionOutcome(
            status=content.get("status", "error"), ename=content.get("ename", ""),
            evalue=content.get("evalue", ""), traceback=list(content.get("traceback", [])),
            seconds=time.monotonic() - started, user_expressions=expressions,
            output_complete=complete and not lost, lost_chars=lost,
            log_path=self.output_log if not silent else "")

    async def _pump_iopub(self, msg_id: str, relay: MessageCallback, last_message: list[float]) -> None:
        """Relay this request's output until its ``idle`` status arrives."""
        while True:
            msg = await self.client.get_iopub_msg()
            last_message[0] = time.monotonic()
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            msg_type = msg["msg_type"]
            if msg_type == "status" and msg["content"].get("execution_state") == "idle":
                return
            if msg_type in OUTPUT_TYPES:
                relay(msg)

    async def _await_reply(self, reply_task: asyncio.Future[dict[str, Any]],
                           pump: asyncio.Future[None]) -> dict[str, Any] | None:
        """The execute_reply; None if ``idle`` came and the reply did not follow in time."""
        either: list[asyncio.Future[Any]] = [reply_task, pump]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not reply_task.done():
            if pump.done() and pump.exception() is not None:
                raise pump.exception()  # type: ignore[misc]
            done, _ = await asyncio.wait([reply_task], timeout=REPLY_AFTER_IDLE_SECONDS)
            if not done:
                return None
        return reply_task.result()

    async def _drain(self, pump: asyncio.Future[None], last_message: list[float]) -> bool:
        """Let the IOPub pump reach ``idle`` while messages keep arriving; False if it never does."""
        while not pump.done():
            quiet_for = time.monotonic() - last_message[0]
            if quiet_for >= DRAIN_QUIET_SECONDS:
                return False
            await asyncio.wait([pump], timeout=DRAIN_QUIET_SECONDS - quiet_for)
        if pump.exception() is not None:
            raise pump.exception()  # type: ignore[misc]
        return True

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
