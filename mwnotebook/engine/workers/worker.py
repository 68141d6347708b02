"""One worker connection: a started kernel (any launcher) plus the jupyter_client connection to it.

Messages are read straight off the ZMQ sockets with no polling interval, so a cell's output and
its completion reach the notebook as soon as the kernel sends them. One reader owns IOPub for the
worker's whole life: output of a running request goes to that request; output whose request has
ended (a thread printing after its cell returned) goes to :class:`~mwnotebook.engine.cell.late_output.LateOutput`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, cast

from jupyter_client.connect import KernelConnectionInfo

from mwnotebook.engine.cell.late_output import LateOrigin, LateOutput
from mwnotebook.engine.cell.output_tally import OutputTally
from mwnotebook.engine.workers.bootstrap import SETTLE_EXPRESSION
from mwnotebook.engine.workers.wire import WorkerClient
from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.base import KernelHandle
from mwnotebook.launchers.capabilities import HasLogTail

log = logging.getLogger(__name__)

MessageCallback = Callable[[dict[str, Any]], None]

#: IOPub message types that carry cell output.
OUTPUT_TYPES = frozenset({"stream", "display_data", "update_display_data", "execute_result", "error",
                          "clear_output"})


@dataclass
class ExecutionOutcome:
    """How one worker's execution of a cell ended."""

    status: Literal["ok", "error", "aborted"]  # the execute_reply's status
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
#: A message the worker made this long after a request's reply proves that request's idle (made right
#: after the reply, sent before the message) was lost: see ``Worker._drain``.
IDLE_PASSED_SECONDS = 1.0
#: The longest wait for a request's idle after its reply when the messages' dates cannot tell (a
#: thread printing every second would otherwise hold a cell whose idle was lost). Generous: a real
#: backlog cut here is not lost, it is shown as late output.
DRAIN_MAX_SECONDS = 120.0
#: How often the drain looks again whether a message made after the idle has arrived.
_DRAIN_POLL_SECONDS = 0.25
#: After ``idle``, how long the execute_reply may take before it is counted as lost.
REPLY_AFTER_IDLE_SECONDS = 10.0
#: The user expression through which a worker reports how much it wrote (mwnotebook/processes/runtime/output.py).
OUTPUT_COUNT_KEY = "_mw_output_written"
OUTPUT_COUNT_EXPRESSION = "__import__('mwnotebook.processes.runtime.output', fromlist=['written']).written()"
#: Where a worker with mwnotebook/processes/runtime/reply.py puts those answers instead: its
#: execute_reply's ``metadata[REPLY_METADATA_KEY]``, one field per expression it replaces.
REPLY_METADATA_KEY = "mwnotebook"
REPLY_METADATA_FIELDS = {OUTPUT_COUNT_EXPRESSION: "written", SETTLE_EXPRESSION: "settle"}


def output_log_dir() -> str:
    """Where this notebook process keeps its workers' output logs (one file per worker index)."""
    path = os.path.join(tempfile.gettempdir(), f"mwnotebook-output-{os.getuid()}-{os.getpid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _date(value: Any) -> datetime | None:
    """A message header's date (an ISO string as :mod:`mwnotebook.engine.workers.wire` leaves it, or a
    datetime from jupyter_client's own parsing), or None if it has none that can be compared."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    return value if isinstance(value, datetime) and value.tzinfo is not None else None


def _as_expression(value: Any) -> dict[str, Any]:
    """A value from reply metadata, in the shape of an evaluated user expression."""
    if value is None:
        return {"status": "error", "ename": "Missing", "evalue": "not in the reply's metadata"}
    return {"status": "ok", "data": {"text/plain": repr(value)}, "metadata": {}}


class Worker:
    """A worker kernel and its client. Not thread-safe: used from the cluster's event loop only.

    ``client``: the kernel client to use instead of one made from the handle's connection info (a
    fake, in tests); ``output_log``: where cells' output is appended (default: a file per worker
    index in :func:`output_log_dir`).
    """

    #: The worker answers the per-cell questions in its reply's metadata (learnt from a reply).
    answers_in_metadata = False

    def __init__(self, handle: KernelHandle, late: LateOutput | None = None, *,
                 client: WorkerClient | None = None, output_log: str | None = None) -> None:
        self.handle = handle
        self._init_iopub_routing(late)
        if client is None:
            client = WorkerClient()
            client.load_connection_info(cast(KernelConnectionInfo, handle.connection_info))
        self.client = client
        # One request at a time: concurrent readers of the same ZMQ sockets would steal each
        # other's messages.
        self._busy = asyncio.Lock()
        self.output_log = output_log or os.path.join(output_log_dir(), f"worker-{handle.index}.log")

    def _init_iopub_routing(self, late: LateOutput | None) -> None:
        #: Where output of requests that have ended goes (shared by the cluster's workers).
        self.late = late if late is not None else LateOutput()
        self._listeners: dict[str, MessageCallback] = {}  # running request msg_id -> its handler
        self._origins: dict[str, LateOrigin] = {}  # recent request msg_id -> the cell it belongs to
        self._last_origin = self.late.origin
        self._last_iopub = time.monotonic()
        self._newest_date: Any = None  # the header date of the newest IOPub message, unparsed
        self._reader: asyncio.Future[None] | None = None

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
                self._reader = asyncio.ensure_future(self._read_iopub())
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
        tail = self.handle.log_tail() if isinstance(self.handle, HasLogTail) else ""
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
        # Asked through the reply's metadata, not evaluated as expressions (see reply.py in processes/runtime).
        from_metadata = {name: REPLY_METADATA_FIELDS[code_] for name, code_ in user_expressions.items()
                         if self.answers_in_metadata and code_ in REPLY_METADATA_FIELDS}
        asked = {name: code_ for name, code_ in user_expressions.items() if name not in from_metadata}
        msg_id = self.client.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                                     stop_on_error=False, user_expressions=asked)
        self._remember_origin(msg_id, silent)
        tally = OutputTally(self.output_log if not silent else None)
        idle: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def relay(msg: dict[str, Any]) -> None:
            msg_type = msg["msg_type"]
            if msg_type == "status" and msg["content"].get("execution_state") == "idle":
                self._listeners.pop(msg_id, None)
                if not idle.done():
                    idle.set_result(None)
            elif msg_type in OUTPUT_TYPES:
                tally.add(msg)
                on_output(msg)

        if self._reader is None:
            self._reader = asyncio.ensure_future(self._read_iopub())
        if self._reader.done():
            raise ConnectionError(f"worker {self.index}: its IOPub channel is closed")
        self._listeners[msg_id] = relay
        reply_task = asyncio.ensure_future(self._reply_for(msg_id, "execute_reply"))
        expressions: dict[str, Any] = {}
        try:
            reply = await self._await_reply(reply_task, idle)
            if reply is not None:
                expressions = self._answers(reply, from_metadata)
                tally.expect(expressions.pop(OUTPUT_COUNT_KEY, None))
            self._last_iopub = max(self._last_iopub, time.monotonic())  # the drain's quiet time starts now
            complete = await self._drain(idle, (reply.get("header") or {}).get("date") if reply else None)
        finally:
            self._listeners.pop(msg_id, None)
            if not reply_task.done():
                reply_task.cancel()
            if not idle.done():
                idle.cancel()
            tally.close()
        if reply is None:
            return ExecutionOutcome(
                status="error", ename="ReplyLost",
                evalue=f"worker {self.index} went idle but its execute_reply never arrived "
                       f"(waited {REPLY_AFTER_IDLE_SECONDS:.0f} s)", seconds=time.monotonic() - started,
                output_complete=complete, log_path=self.output_log)
        content = reply["content"]
        lost = tally.lost()
        if lost:
            log.warning("worker %d: characters it wrote never reached the notebook (its own count, per "
                        "stream): %s", self.index, lost)
        elif not complete:
            log.warning("worker %d: its end-of-cell 'idle' status never arrived (%s); output after now is "
                        "shown as late output", self.index,
                        "all the output it counted did" if tally.caught_up() else "its output may be cut")
        return ExecutionOutcome(
            status=content.get("status", "error"), ename=content.get("ename", ""),
            evalue=content.get("evalue", ""), traceback=list(content.get("traceback", [])),
            seconds=time.monotonic() - started, user_expressions=expressions,
            output_complete=complete and not lost, lost_chars=lost,
            log_path=self.output_log if not silent else "")

    def _remember_origin(self, msg_id: str, silent: bool) -> None:
        """A cell's request takes the frontend's current origin; a silent one (set-up, release) the
        last cell's, since a plain kernel labels a thread's output with whatever request came last."""
        if not silent:
            self._last_origin = self.late.origin
        self._origins[msg_id] = self._last_origin
        while len(self._origins) > 64:
            self._origins.pop(next(iter(self._origins)))

    async def _read_iopub(self) -> None:
        """The worker's only IOPub reader: each message to its running request, or to late output."""
        try:
            while True:
                msg = await self.client.get_iopub_msg()
                self._last_iopub = time.monotonic()
                self._newest_date = (msg.get("header") or {}).get("date") or self._newest_date
                parent = msg.get("parent_header", {}).get("msg_id")
                listener = self._listeners.get(parent) if parent else None
                if listener is not None:
                    listener(msg)
                elif msg.get("msg_type") in OUTPUT_TYPES:
                    self._late_message(msg, self._origins.get(parent or "", self._last_origin))
        except asyncio.CancelledError:
            raise
        except Exception:  # the channel is gone: the running request learns it from the drain
            log.debug("worker %d: IOPub reader stopped", self.index, exc_info=True)

    def _late_message(self, msg: dict[str, Any], origin: LateOrigin) -> None:
        """Output after its request ended: into the worker's log (always), then to the frontend."""
        if msg["msg_type"] == "stream":
            try:
                with open(self.output_log, "a", encoding="utf-8") as file:
                    file.write(msg["content"].get("text", ""))
            except OSError:
                log.debug("worker %d: cannot append late output to %s", self.index, self.output_log)
        self.late.add(self.index, msg, origin, self.output_log)

    async def _await_reply(self, reply_task: asyncio.Future[dict[str, Any]],
                           idle: asyncio.Future[None]) -> dict[str, Any] | None:
        """The execute_reply; None if ``idle`` came and the reply did not follow in time."""
        either: list[asyncio.Future[Any]] = [reply_task, idle]
        while not reply_task.done() and not idle.done():
            await asyncio.wait(either, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            if self._reader is not None and self._reader.done() and not reply_task.done():
                raise ConnectionError(f"worker {self.index}: its IOPub channel closed during the cell")
        if not reply_task.done():
            done, _ = await asyncio.wait([reply_task], timeout=REPLY_AFTER_IDLE_SECONDS)
            if not done:
                return None
        return reply_task.result()

    def _answers(self, reply: dict[str, Any], from_metadata: dict[str, str]) -> dict[str, Any]:
        """The reply's user expressions, with those answered in its metadata filled in."""
        expressions = dict(reply["content"].get("user_expressions") or {})
        answers = (reply.get("metadata") or {}).get(REPLY_METADATA_KEY)
        if isinstance(answers, dict):
            self.answers_in_metadata = True
            for name, key in from_metadata.items():
                expressions[name] = _as_expression(answers.get(key))
        return expressions

    async def _drain(self, idle: asyncio.Future[None], replied: Any) -> bool:
        """Let this request's ``idle`` arrive; False if it never does.

        ipykernel makes the idle right after the reply (``replied``: the reply's date, the worker's
        clock) and sends it on the same socket as all output, which arrives in the order sent. So a
        backlog of output the worker sent before its idle may take its time (the wait goes on while
        messages keep coming), but once a message arrives that the worker made clearly after its
        reply (IDLE_PASSED_SECONDS), the idle would have come before it: it was lost, and the wait
        ends. Else (a worker whose messages carry no dates) after DRAIN_MAX_SECONDS at the latest: a
        thread printing every second must not hold a cell whose idle was lost.
        """
        started = time.monotonic()
        replied_at = _date(replied) if not idle.done() else None  # parsed only when the idle is late
        passed = replied_at + timedelta(seconds=IDLE_PASSED_SECONDS) if replied_at is not None else None
        while not idle.done():
            newest = _date(self._newest_date) if passed is not None else None
            if passed is not None and newest is not None and newest > passed:
                return False
            now = time.monotonic()
            left = min(DRAIN_QUIET_SECONDS - (now - self._last_iopub), DRAIN_MAX_SECONDS - (now - started))
            if left <= 0:
                return False
            await asyncio.wait([idle], timeout=min(left, _DRAIN_POLL_SECONDS))
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
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        self.client.stop_channels()
        await self.handle.kill()
