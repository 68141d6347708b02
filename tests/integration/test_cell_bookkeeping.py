"""Real ipykernel workers: the per-cell bookkeeping rides in each execute_reply's metadata
(mwnotebook/processes/runtime/reply.py), and what it replaced still works."""

from __future__ import annotations

import pytest

from mwnotebook import Cluster

pytestmark = pytest.mark.integration

ASKED = "print(sorted(get_ipython().kernel.get_parent()['content']['user_expressions']))"


@pytest.fixture(scope="module")
def cluster():
    with Cluster(workers=2) as c:
        yield c


def test_cells_evaluate_no_user_expressions_in_the_workers(cluster):
    result = cluster.run(ASKED)
    assert [result.stdout(i) for i in range(2)] == ["[]\n"] * 2
    assert all(w.answers_in_metadata for w in cluster.workers)


def test_ipykernels_sleep_before_each_reply_is_off(cluster):
    result = cluster.run("print(get_ipython().kernel._execute_sleep)")
    assert [result.stdout(i) for i in range(2)] == ["0.0\n"] * 2


def test_output_without_a_final_newline_or_flush_arrives(cluster):
    result = cluster.run("import sys\nsys.stdout.write('no newline')\nsys.stderr.write('err too')")
    assert [result.stdout(i) for i in range(2)] == ["no newline"] * 2
    assert [result.stderr(i) for i in range(2)] == ["err too"] * 2


def test_output_the_worker_counted_but_the_notebook_never_got_is_reported(cluster):
    # The worker's own count says 7 more characters were written than were sent.
    result = cluster.run("import mwnotebook.processes.runtime.output as _o\n"
                         "_o._count(get_ipython().kernel.get_parent()['header']['msg_id'], 'stdout', 7)\n"
                         "print('x')")
    for outcome in result.outcomes:
        assert outcome is not None and outcome.lost_chars == {"stdout": 7} and not outcome.output_complete


def test_replaced_objects_are_released_between_cells_when_tensorflow_is_loaded(cluster):
    # A stand-in module named tensorflow: _lifetime only asks whether it is loaded.
    cluster.run("import sys, types\nsys.modules.setdefault('tensorflow', types.ModuleType('tensorflow'))\n"
                "import mwnotebook.worker._lifetime as _l\nheld = object()")
    cluster.run("held = object()")  # replaces the held object: the worker's reply says to release
    # query waits for the background release; without it the hold would still be there.
    assert cluster.query("print(len(_l._held))") == ["0\n", "0\n"]
    cluster.run("pass")  # replaces nothing: no release is needed, and the hold is dropped at once
    assert cluster.query("print(len(_l._held))") == ["0\n", "0\n"]


def test_workers_do_not_echo_the_cell_on_iopub(cluster):
    client = cluster.workers[0].client
    seen: list[str] = []
    receive = client.get_iopub_msg

    async def recording(*args, **kwargs):
        msg = await receive(*args, **kwargs)
        seen.append(msg["msg_type"])
        return msg
    client.get_iopub_msg = recording  # the worker's IOPub reader looks it up for every message
    try:
        cluster.run("pass")  # the reader is already waiting in the old method: one message goes by it
        cluster.run("print('x')")
    finally:
        client.get_iopub_msg = receive
    assert "stream" in seen and "status" in seen
    assert "execute_input" not in seen


def test_workers_send_idle_but_not_busy(cluster):
    client = cluster.workers[0].client
    states: list[str] = []
    receive = client.get_iopub_msg

    async def recording(*args, **kwargs):
        msg = await receive(*args, **kwargs)
        if msg["msg_type"] == "status":
            states.append(msg["content"]["execution_state"])
        return msg
    client.get_iopub_msg = recording
    try:
        for _ in range(3):
            cluster.run("pass")
    finally:
        client.get_iopub_msg = receive
    assert states and set(states) == {"idle"}


def test_the_kernels_logger_builds_no_records_it_would_not_show(cluster):
    answers = cluster.query("import logging\nk = get_ipython().kernel.log\n"
                            "print(k.isEnabledFor(logging.DEBUG), min(h.level for h in k.handlers) <= k.level)")
    assert answers == ["False True\n"] * 2
