"""The relay fed with fake IOPub messages (pure logic; real kernels are in tests/integration)."""

import io

from mwnotebook.engine.cell.iopub_events import events_from_iopub
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


def test_display_groups_match_the_kth_identical_output_of_each_worker():
    from mwnotebook.frontend.text.grouping import DisplayGroups

    groups = DisplayGroups(2)
    a, b = {"image/png": "A"}, {"image/png": "B"}
    assert groups.add(0, a) == (0, True)
    assert groups.add(0, a) == (1, True)  # the same worker twice: a second figure, not a match
    assert groups.add(1, b) == (2, True)
    assert groups.add(1, a) == (0, False)
    assert groups.label(0) == "[all 2 workers] " and groups.label(1) == "[worker 0] "
    assert groups.add(1, a) == (1, False) and groups.workers(1) == [0, 1]


def test_grouped_results_name_their_workers_and_leave_the_data_alone():
    from mwnotebook.frontend.text.grouping import grouped_results

    results = [(1, {"text/html": "<t/>", "text/plain": "x at 0x1"}, {}), (0, {"text/html": "<t/>",
                                                                          "text/plain": "x at 0x2"}, {})]
    [group] = grouped_results(results, 2)
    assert group.workers == (0, 1) and group.label == "[all 2 workers] "
    assert group.data == {"text/html": "<t/>", "text/plain": "x at 0x2"}


def test_terminal_shows_an_identical_rich_display_of_another_worker_once_and_says_so():
    shown, out = [], io.StringIO()
    relay = TextRelay(out, io.StringIO(), display=lambda data, meta: shown.append(data), num_workers=2)
    fig = {"image/png": "AAAA", "text/plain": "<Figure size 640x480 with 1 Axes>"}
    for worker, data in ((0, fig), (1, {"image/png": "BBBB", "text/plain": "<Figure>"}), (1, fig)):
        relay(WorkerOutput(worker, "display_data", {"data": data, "metadata": {}}))
    assert shown == [fig, {"image/png": "BBBB", "text/plain": "<Figure>"}]
    assert out.getvalue() == ("[worker 0] output:\n[worker 1] output:\n"
                              "[worker 1] output: the same as worker 0's above\n")
