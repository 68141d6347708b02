"""A lost IOPub message can never hold a cell: Worker.execute with a fake client.

The execute_reply ends the run; IOPub is drained only while messages keep coming, and a missing
``idle`` is reported as incomplete output instead of waiting forever. The worker's own count of what
it wrote (a user expression) reveals lines that never arrived.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mwnotebook.engine.workers.worker as connection
from mwnotebook.engine.workers.worker import OUTPUT_COUNT_KEY, Worker

from .._shared.iopub import status
from .._shared.iopub import stream as _stream


class FakeClient:
    def __init__(self, iopub: list[dict[str, Any]], written: dict[str, int]) -> None:
        self._iopub = asyncio.Queue()
        self._shell = asyncio.Queue()
        self._script = iopub
        self._written = written

    def execute(self, code: str, **_: Any) -> str:
        for msg in self._script:
            self._iopub.put_nowait({**msg, "parent_header": {"msg_id": "m1"}})
        self._shell.put_nowait({"msg_type": "execute_reply", "parent_header": {"msg_id": "m1"}, "content": {
            "status": "ok", "user_expressions": {OUTPUT_COUNT_KEY: {
                "status": "ok", "data": {"text/plain": repr(self._written)}}}}})
        return "m1"

    async def get_iopub_msg(self) -> dict[str, Any]:
        return await self._iopub.get()

    async def get_shell_msg(self) -> dict[str, Any]:
        return await self._shell.get()


def _worker(client: FakeClient, tmp_path) -> Worker:
    handle = type("H", (), {"index": 0, "host": "fake"})()
    return Worker(handle, client=client, output_log=str(tmp_path / "worker-0.log"))  # type: ignore[arg-type]




def test_lost_idle_ends_the_run_after_a_quiet_drain(tmp_path, monkeypatch):
    monkeypatch.setattr(connection, "DRAIN_QUIET_SECONDS", 0.3)
    client = FakeClient([_stream("a\n")], {"stdout": 2})  # no idle status ever comes
    outcome = asyncio.run(asyncio.wait_for(_worker(client, tmp_path).execute("x", lambda m: None), 5))
    assert outcome.status == "ok" and outcome.output_complete is False
    assert (tmp_path / "worker-0.log").read_text() == "a\n"


def test_lines_the_worker_wrote_but_never_arrived_are_reported(tmp_path):
    idle = status("idle")
    client = FakeClient([_stream("a\n"), idle], {"stdout": 6})
    outcome = asyncio.run(_worker(client, tmp_path).execute("x", lambda m: None))
    assert outcome.lost_chars == {"stdout": 4} and outcome.output_complete is False


def test_complete_output_is_complete(tmp_path):
    idle = status("idle")
    seen: list[dict[str, Any]] = []
    client = FakeClient([_stream("a\n"), _stream("b\n"), idle], {"stdout": 4})
    outcome = asyncio.run(_worker(client, tmp_path).execute("x", seen.append))
    assert outcome.output_complete and not outcome.lost_chars and len(seen) == 2


class MetadataClient(FakeClient):
    """A worker with mwnotebook/processes/runtime/reply.py: it answers in the reply's metadata."""

    def __init__(self, written: dict[str, int], settle: bool) -> None:
        super().__init__([], written)
        self.asked: list[dict[str, str]] = []
        self._settle = settle

    def execute(self, code: str, **kwargs: Any) -> str:
        msg_id = f"m{len(self.asked)}"
        self.asked.append(dict(kwargs.get("user_expressions") or {}))
        self._iopub.put_nowait({"msg_type": "status", "content": {"execution_state": "idle"},
                                "parent_header": {"msg_id": msg_id}})
        answers = {} if kwargs.get("silent") else {"written": self._written, "settle": self._settle}
        self._shell.put_nowait({"msg_type": "execute_reply", "parent_header": {"msg_id": msg_id},
                                "metadata": {connection.REPLY_METADATA_KEY: answers},
                                "content": {"status": "ok", "user_expressions": {}}})
        return msg_id


def test_a_worker_answering_in_its_reply_metadata_is_asked_no_expressions(tmp_path):
    from mwnotebook.engine.workers.bootstrap import SETTLE_EXPRESSION

    client = MetadataClient({"stdout": 3}, settle=True)
    worker = _worker(client, tmp_path)

    async def cells() -> list[connection.ExecutionOutcome]:
        await worker.execute("setup", lambda m: None, silent=True)  # as the cluster's set-up does
        return [await worker.execute("x", lambda m: None, user_expressions={"settle": SETTLE_EXPRESSION})
                for _ in range(2)]

    outcomes = asyncio.run(asyncio.wait_for(cells(), 5))
    assert client.asked[1:] == [{}, {}]  # after the set-up's reply, nothing is evaluated per cell
    for outcome in outcomes:
        assert outcome.expression("settle") == "True"
        assert outcome.lost_chars == {"stdout": 3}  # the count from the metadata is still checked


def test_a_worker_without_reply_metadata_keeps_being_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(connection, "DRAIN_QUIET_SECONDS", 0.3)  # this fake sends no idle
    from mwnotebook.engine.workers.bootstrap import SETTLE_EXPRESSION

    client = FakeClient([], {"stdout": 0})
    worker = _worker(client, tmp_path)
    asked: list[Any] = []
    execute = client.execute
    client.execute = lambda code, **kw: (asked.append(kw.get("user_expressions")), execute(code, **kw))[1]  # type: ignore[method-assign]
    asyncio.run(asyncio.wait_for(worker.execute("x", lambda m: None, user_expressions={"settle": SETTLE_EXPRESSION}),
                                 5))
    assert set(asked[0]) == {"settle", OUTPUT_COUNT_KEY}



class TickingClient(FakeClient):
    """A worker whose idle was lost while a thread it started keeps printing (every 0.05 s, so
    IOPub is never quiet). With ``dated``, messages carry the worker's dates as a kernel's do: the
    reply at 10:00:00, tick n at n seconds later."""

    def __init__(self, dated: bool) -> None:
        super().__init__([], {"stdout": 0})
        self.dated = dated
        self.ticker: asyncio.Future[None] | None = None

    def _header(self, seconds: int) -> dict[str, Any]:
        return {"header": {"date": f"2026-12-01T10:{seconds // 60:02d}:{seconds % 60:02d}.000000Z"}} if self.dated else {}

    def execute(self, code: str, **_: Any) -> str:
        msg_id = super().execute(code)
        reply = self._shell.get_nowait()
        self._shell.put_nowait({**reply, **self._header(0)})

        async def tick() -> None:
            for n in range(1, 1000):
                await asyncio.sleep(0.05)
                self._iopub.put_nowait({**_stream(f"tick {n}\n"), "parent_header": {"msg_id": msg_id},
                                        **self._header(n)})
        self.ticker = asyncio.ensure_future(tick())
        return msg_id

    def run(self, tmp_path) -> connection.ExecutionOutcome:
        async def run() -> connection.ExecutionOutcome:
            try:
                return await asyncio.wait_for(_worker(self, tmp_path).execute("x", lambda m: None), 5)
            finally:
                if self.ticker is not None:
                    self.ticker.cancel()
        return asyncio.run(run())


def test_a_lost_idle_does_not_wait_behind_a_thread_that_keeps_printing(tmp_path, monkeypatch):
    # IOPub is never quiet, but a message the worker made 2 s after its reply shows the idle is gone.
    monkeypatch.setattr(connection, "DRAIN_MAX_SECONDS", 60.0)
    outcome = TickingClient(dated=True).run(tmp_path)
    assert outcome.status == "ok" and outcome.output_complete is False


def test_without_dates_the_wait_for_a_lost_idle_is_still_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(connection, "DRAIN_MAX_SECONDS", 0.5)
    outcome = TickingClient(dated=False).run(tmp_path)
    assert outcome.status == "ok" and outcome.output_complete is False
