"""Output a worker thread prints after its %%mwtrain cell returned reaches the notebook, labelled.

A real notebook kernel (ipykernel, driven by jupyter_client as a frontend drives it) runs the magic
on real worker kernels. Where the late lines must land follows a plain ipykernel (its threads' output
carries the latest request): the originating cell while the notebook is idle, the running cell while
another cell runs. Also: a worker's clear_output clears all that worker wrote in the cell, nothing
else. No TensorFlow needed.
"""

from __future__ import annotations

import queue
import time
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.integration

LATE_CELL = '''%%mwtrain --workers 2 --no-dashboard
import os, threading, time
def _late(tag=TAG, delay=DELAY):
    time.sleep(delay)
    print("late", tag, os.environ["MWNOTEBOOK_WORKER_INDEX"], flush=True)
threading.Thread(target=_late).start()
print("body")
'''


def _late_cell(tag: str, delay: float) -> str:
    return LATE_CELL.replace("TAG", repr(tag)).replace("DELAY", repr(delay))


@pytest.fixture(scope="module")
def notebook_kernel():
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=60)
    try:
        _run(kc, "%load_ext mwnotebook")
        yield kc
    finally:
        try:
            _run(kc, "%mwcluster stop", timeout=60)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=False)


def _run(kc: Any, code: str, timeout: float = 120) -> str:
    msg_id = kc.execute(code)
    reply = kc.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=timeout)
    assert reply["content"]["status"] == "ok", reply["content"]
    return msg_id


def _iopub(kc: Any, seconds: float) -> list[dict[str, Any]]:
    """Every IOPub message for ``seconds``."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            out.append(kc.get_iopub_msg(timeout=0.2))
        except queue.Empty:
            continue
    return out


def _streams(kc: Any, seconds: float) -> list[tuple[str, str]]:
    """(parent msg_id, text) of every stream message on IOPub for ``seconds``."""
    return [(msg["parent_header"].get("msg_id", ""), msg["content"]["text"])
            for msg in _iopub(kc, seconds) if msg["msg_type"] == "stream"]


def _count_of(kc: Any) -> int:
    """The execution count the next cell gets."""
    msg_id = kc.execute("pass")
    reply = kc.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    return reply["content"]["execution_count"] + 1


def _assert_late_lines_in(cell: str, streams: list[tuple[str, str]], count: int, tag: str) -> None:
    """Both workers' late line, labelled with the cell ``count`` that started the thread, in ``cell``."""
    for worker in (0, 1):
        line = f"[worker {worker}, after cell {count}] late {tag} {worker}\n"
        assert any(parent == cell and line in text for parent, text in streams), (line, streams)


def test_late_thread_output_lands_in_its_cell_while_the_notebook_is_idle(notebook_kernel):
    kc = notebook_kernel
    count = _count_of(kc)
    cell = _run(kc, _late_cell("idle", 1.0))
    _assert_late_lines_in(cell, _streams(kc, 6.0), count, "idle")


def test_late_thread_output_lands_in_the_running_cell_as_in_a_plain_kernel(notebook_kernel):
    kc = notebook_kernel
    count = _count_of(kc)
    _run(kc, _late_cell("busy", 1.5))
    _streams(kc, 0.1)
    sleeper = _run(kc, "import time\ntime.sleep(4)")
    _assert_late_lines_in(sleeper, _streams(kc, 1.0), count, "busy")


def test_clear_output_in_a_worker_clears_all_it_wrote_in_the_cell_and_nothing_else(notebook_kernel):
    kc = notebook_kernel
    cell = _run(kc, "%%mwtrain --workers 2 --no-dashboard\nimport os\nfrom IPython.display import clear_output\n"
                    "w = os.environ['MWNOTEBOOK_WORKER_INDEX']\nprint('before', w)\nfor i in range(5):\n"
                    "    if w == '0':\n        clear_output(wait=True)\n    print('step', i, w)")
    shown: dict[str, str] = {}  # display id -> its last text; streams under their own keys
    for msg in _iopub(kc, 3.0):
        if msg["parent_header"].get("msg_id") != cell:
            continue
        content = msg["content"]
        if msg["msg_type"] == "stream":
            shown[f"stream-{len(shown)}"] = content["text"]
        elif msg["msg_type"] in ("display_data", "update_display_data"):
            shown[content.get("transient", {}).get("display_id", f"display-{len(shown)}")] = content["data"]["text/plain"]
        elif msg["msg_type"] == "clear_output":
            shown.clear()  # the notebook itself must never clear the cell
    text = "\n".join(shown.values())
    assert "[worker 0] step 4 0" in text and "before 0" not in text and "step 3 0" not in text, text
    assert all(f"[worker 1] step {i} 1" in text for i in range(5)) and "[worker 1] before 1" in text, text
