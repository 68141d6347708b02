"""A lost IOPub message can never hold a cell (issue 12, item 5): Worker.execute with a fake client.

The execute_reply ends the run; IOPub is drained only while messages keep coming, and a missing
``idle`` is reported as incomplete output instead of waiting forever. The worker's own count of what
it wrote (a user expression) reveals lines that never arrived.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mwnotebook.engine.connection as connection
from mwnotebook.engine.connection import OUTPUT_COUNT_KEY, Worker

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
    worker = Worker.__new__(Worker)
    worker.client = client  # type: ignore[assignment]
    worker._busy = asyncio.Lock()
    worker.output_log = str(tmp_path / "worker-0.log")
    worker.handle = type("H", (), {"index": 0})()  # type: ignore[assignment]
    worker._init_iopub_routing(None)
    return worker




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
