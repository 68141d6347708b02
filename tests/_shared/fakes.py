"""Test-only fakes written once for the unit tests of pure engine logic: a worker's process handle
(:class:`FakeHandle`, for the start, status and cell-policy tests), a kernel that plays a script of
IOPub messages and a reply (:class:`FakeWorker`), the role servers a status is read from
(:class:`FakeKernel`, :class:`FakeServers`), ``execute_reply`` contents, and metric records.

Real parts (kernels, clusters, hosts) are never faked where a user would meet them: those tests use
the test bed (testbed/).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from mwnotebook.config.roles import Task
from mwnotebook.engine.workers.worker import ExecutionOutcome

from .iopub import stream as _stream

#: Addresses of a four-task cluster, for status views.
ADDRESSES = ["localhost:1000", "localhost:1001", "localhost:1002", "localhost:1003"]

#: A two-worker run's metric records: batches of step 1, the epoch-0 line of step 2 (one value NaN).
RECORDS = [
    {"worker": 0, "step": 1, "time": 1.0, "kind": "batch", "loss": 0.9, "global_loss": 0.8},
    {"worker": 1, "step": 1, "time": 1.0, "kind": "batch", "loss": 0.7, "global_loss": 0.8},
    {"worker": 0, "step": 2, "time": 2.0, "kind": "epoch", "epoch": 0, "loss": 0.5, "global_loss": 0.45,
     "accuracy": "NaN"},
    {"worker": 1, "step": 2, "time": 2.0, "kind": "epoch", "epoch": 0, "loss": 0.4, "global_loss": 0.45},
]


@dataclass
class FakeHandle:
    """A worker's process handle as the engine sees it: alive until killed (or told otherwise),
    interrupts counted, an exit description once it is dead."""

    index: int = 0
    pid: int | None = None
    host: str = "localhost"
    alive: bool = True
    on_this_machine: bool = True
    description: str = ""
    connection_info: dict[str, Any] = field(default_factory=dict)
    interrupts: int = 0
    interrupted: asyncio.Event = field(default_factory=asyncio.Event)
    killed: bool = False

    async def is_alive(self) -> bool:
        return self.alive

    def exit_description(self) -> str:
        return "" if self.alive else self.description

    async def interrupt(self) -> None:
        self.interrupts += 1
        self.interrupted.set()

    async def kill(self) -> None:
        self.alive = False
        self.killed = True


@dataclass
class FakeKernel:
    """A role server's kernel: only its handle is read."""

    handle: FakeHandle


class FakeServers:
    """The role servers of a ``--ps`` cluster as the status reads them: kernels, states, restarts."""

    def __init__(self, kernels: dict[Task, FakeKernel], states: dict[Task, str], restarts: dict[Task, int],
                 notes: dict[Task, str] | None = None) -> None:
        self.kernels, self.states, self.restarts_of = kernels, states, restarts
        self.notes = notes or {}

    def server(self, task: Task) -> FakeKernel | None:
        return self.kernels.get(task)


def error_reply(ename: str, evalue: str, frames: int = 3) -> dict[str, Any]:
    """An ``execute_reply`` content for an exception, its traceback ``frames`` deep."""
    tb = ["\x1b[0;31m------\x1b[0m", f"\x1b[0;31m{ename}\x1b[0m  Traceback (most recent call last)"]
    tb += [f"File site-packages/frame_{k}.py, line {k}, in step_{k}" for k in range(frames)]
    tb.append(f"\x1b[0;31m{ename}\x1b[0m: {evalue}")
    return {"status": "error", "ename": ename, "evalue": evalue, "traceback": tb, "user_expressions": {}}


OK_REPLY = {"status": "ok", "user_expressions": {"settle": {"status": "ok", "data": {"text/plain": "False"}}}}
KEYBOARD = error_reply("KeyboardInterrupt", "", frames=40)
LOST_PEER = error_reply("UnavailableError", "Collective ops is aborted by: failed to connect to all addresses",
                        frames=40)


def stream(text: str) -> dict[str, Any]:
    """A stdout ``stream`` message of the cell's request."""
    return _stream(text, parent="x")


@dataclass
class FakeWorker:
    """A kernel that prints ``outputs``, then after ``delay`` s replies ``reply``.

    ``reply=None`` runs until interrupted, then replies ``on_interrupt`` (``None``: ignores the
    interrupt, like a frozen process). ``dies_after`` ends the process instead of replying; ``lose``
    makes the channel fail (an exception from execute).
    """

    index_: int
    reply: dict[str, Any] | None = None
    delay: float = 0.0
    outputs: list[dict[str, Any]] = field(default_factory=list)
    on_interrupt: dict[str, Any] | None = field(default_factory=lambda: KEYBOARD)
    dies_after: float | None = None
    lose: bool = False
    handle: FakeHandle = None  # type: ignore[assignment]
    output_log: str = ""

    def __post_init__(self) -> None:
        self.handle = FakeHandle(self.index_)

    @property
    def index(self) -> int:
        return self.index_

    async def execute(self, code: str, on_output: Any, silent: bool = False,
                      user_expressions: dict[str, str] | None = None) -> ExecutionOutcome:
        assert user_expressions and "settle" in user_expressions
        for msg in self.outputs:
            on_output(msg)
        if self.lose:
            await asyncio.sleep(self.delay)
            raise ConnectionResetError("channel closed")
        if self.dies_after is not None:
            await asyncio.sleep(self.dies_after)
            self.handle.alive = False
            self.handle.description = "killed by SIGKILL"
            await asyncio.Event().wait()  # a dead kernel never answers
        if self.reply is not None:
            await asyncio.sleep(self.delay)
            return outcome(self.reply)
        await self.handle.interrupted.wait()
        if self.on_interrupt is None:
            await asyncio.Event().wait()
        return outcome(self.on_interrupt)


def outcome(content: dict[str, Any]) -> ExecutionOutcome:
    """What :class:`~mwnotebook.engine.workers.worker.Worker` makes of an execute_reply's content."""
    return ExecutionOutcome(status=content.get("status", "error"), ename=content.get("ename", ""),
                            evalue=content.get("evalue", ""), traceback=list(content.get("traceback", [])),
                            user_expressions=dict(content.get("user_expressions") or {}))
