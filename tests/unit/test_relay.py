"""The relay fed with fake IOPub messages (pure logic; real kernels are in tests/integration)."""

import io

from mwnotebook.engine.iopub_events import events_from_iopub
from mwnotebook.frontend.text.relay import LineLabeller, TextRelay
from mwnotebook.shared.events import METRICS_MIME, WorkerMetrics, WorkerOutput

from .._shared.iopub import stream


def test_stream_becomes_output_event():
    [event] = events_from_iopub(1, stream("hi\n"))
    assert event == WorkerOutput(worker=1, msg_type="stream", content={"name": "stdout", "text": "hi\n"})


def test_metrics_display_data_becomes_metrics_not_output():
    msg = {"msg_type": "display_data", "content": {"data": {METRICS_MIME: {"records": [{"step": 1, "loss": 0.5}]}},
                                                   "metadata": {}}}
    [event] = events_from_iopub(0, msg)
    assert isinstance(event, WorkerMetrics)
    assert event.records == ({"step": 1, "loss": 0.5, "worker": 0},)


def test_partial_lines_are_held_until_complete():
    labeller = LineLabeller()
    assert labeller.feed(0, "stdout", "abc") == ""
    assert labeller.feed(1, "stdout", "xyz\n") == "[worker 1] xyz\n"
    assert labeller.feed(0, "stdout", "def\nghi") == "[worker 0] abcdef\n"
    assert labeller.flush() == [("stdout", "[worker 0] ghi\n")]


def test_text_relay_labels_each_worker_and_stream():
    out, err = io.StringIO(), io.StringIO()
    relay = TextRelay(out, err)
    for worker, msg in [(0, stream("a\nb\n")), (1, stream("warn\n", "stderr")), (1, stream("c\n"))]:
        for event in events_from_iopub(worker, msg):
            relay(event)
    assert out.getvalue() == "[worker 0] a\n[worker 0] b\n[worker 1] c\n"
    assert err.getvalue() == "[worker 1] warn\n"


def test_rich_output_is_labelled_and_displayed():
    shown = []
    out = io.StringIO()
    relay = TextRelay(out, io.StringIO(), display=lambda data, meta: shown.append(data))
    msg = {"msg_type": "display_data", "content": {"data": {"text/html": "<b>x</b>"}, "metadata": {}}}
    for event in events_from_iopub(1, msg):
        relay(event)
    assert shown == [{"text/html": "<b>x</b>"}]
    assert out.getvalue() == "[worker 1] output:\n"
