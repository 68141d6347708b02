"""The dashboard fed with fake events: traces, status, throttling, static copy, plain data."""

from __future__ import annotations

import threading
import time

import pytest

from mwnotebook.dashboard import Dashboard
from mwnotebook.shared.events import WorkerMetrics, WorkerOutput, WorkerStateChanged


class _Handle:
    """Stands for a display handle: records each update sent to the frontend."""

    def __init__(self, name: str, updates: list):
        self.name, self.updates = name, updates

    def update(self, obj, raw=False):
        self.updates.append((self.name, raw, obj, time.monotonic()))


def _shown(dash: Dashboard) -> list:
    """Give ``dash`` display handles; returns the list of (display, raw, bundle, time) it updates."""
    updates: list = []
    dash._chart_handle, dash._status_handle = _Handle("chart", updates), _Handle("status", updates)
    return updates


def _count_figure_messages(dash: Dashboard) -> list[float]:
    """Times at which the chart's display was updated (one message to the frontend each)."""
    updates = _shown(dash)

    class Times(list):
        def __len__(self):
            return sum(1 for u in updates if u[0] == "chart")

    return Times()


def _metrics(worker, step, **values):
    return WorkerMetrics(worker, ({"step": step, "time": 1000.0 + step * 0.01, **values},))


def _names(dash):
    """Names of the traces a user sees (the global one is hidden until reported)."""
    return [t.name for t in dash.figure.data if t.visible is not False]


def test_one_trace_per_worker_and_a_global_trace_once_reported():
    dash = Dashboard(3)
    assert _names(dash) == [f"worker {w} (local loss)" for w in range(3)]
    for step in range(4):
        for w in range(3):
            dash(_metrics(w, step, loss=1.0 + w + step, global_loss=0.5 + step))
    dash.finish()
    assert _names(dash)[3] == "global loss (all workers)" and len(_names(dash)) == 4
    for w in range(3):
        assert list(dash.figure.data[w].x) == [0, 1, 2, 3]
        assert list(dash.figure.data[w].y) == [1.0 + w + s for s in range(4)]
    assert list(dash.figure.data[3].y) == [0.5, 1.5, 2.5, 3.5]


def test_status_rows_follow_states_steps_values_and_rate():
    dash = Dashboard(2)
    dash(WorkerStateChanged(0, "starting"))
    dash(WorkerStateChanged(1, "starting"))
    rows = dash.status_rows()
    assert [r["state"] for r in rows] == ["starting", "starting"]
    for step in range(11):  # worker clock: 100 steps per second
        dash(_metrics(0, step, loss=2.0 - step / 10))
    dash(_metrics(1, 0, global_loss=0.75))
    dash(WorkerStateChanged(0, "done"))
    rows = dash.status_rows()
    assert rows[0]["state"] == "done" and rows[0]["step"] == 10
    assert rows[0]["last"] == pytest.approx(1.0) and rows[0]["scope"] == "local"
    assert rows[0]["steps_per_s"] == pytest.approx(100.0)
    # metrics imply the worker runs even if the state event was missed
    assert rows[1]["state"] == "running" and rows[1]["scope"] == "global"
    assert "(global)" in dash.status_html()


def test_failed_worker_turns_red_with_its_error_name():
    dash = Dashboard(2)
    updates = _shown(dash)
    dash(_metrics(1, 0, loss=1.0))
    dash(WorkerStateChanged(1, "failed", error="ResourceExhaustedError"))
    dash.finish()
    html = dash.status_html()
    row = [r for r in html.split("<tr") if "mw-failed" in r]
    assert len(row) == 1 and "ResourceExhaustedError" in row[0] and "background:#f8d7da" in row[0]
    assert [u[2]["text/html"] for u in updates if u[0] == "status"][-1] == html
    assert "failed: ResourceExhaustedError" in dash.figure.data[1].name
    assert "ResourceExhaustedError" in dash.status_text()


def test_output_events_are_ignored():
    dash = Dashboard(1)
    dash(WorkerOutput(0, "stream", {"name": "stdout", "text": "hi"}))
    assert dash.records == [] and dash.update_times == []


def test_frontend_updates_are_throttled_and_the_end_is_flushed():
    dash = Dashboard(2, max_updates_per_s=5.0)
    sent = _count_figure_messages(dash)
    start = time.monotonic()
    step = 0
    while time.monotonic() - start < 1.6:  # workers report as fast as they can
        for w in range(2):
            dash(_metrics(w, step, loss=1.0 / (step + 1), global_loss=0.5 / (step + 1)))
        step += 1
    dash.finish()
    assert step > 500, "the event path itself must be cheap"
    # ~5 updates/s plus the final one; generous margins on a shared machine
    assert 3 <= len(dash.update_times) <= 1.6 * 5 + 3
    assert dash.max_update_rate(window=1.0) <= 6
    # each update is exactly one batched figure message
    assert len(sent) == len(dash.update_times)
    for w in range(2):
        assert dash.figure.data[w].x[-1] == step - 1  # nothing lost at the end
    assert dash.store.point_count(0, "loss") == step


def test_a_pending_change_reaches_the_frontend_without_further_events():
    dash = Dashboard(1, max_updates_per_s=5.0)
    dash(_metrics(0, 0, loss=1.0))  # first update goes out at once
    dash(_metrics(0, 1, loss=0.5))  # inside the interval: waits for the timer
    assert len(dash.figure.data[0].x) == 1
    deadline = time.monotonic() + 5
    while len(dash.figure.data[0].x) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(dash.figure.data[0].y) == [1.0, 0.5]


def test_events_from_several_threads_lose_nothing():
    dash = Dashboard(4)

    def feed(worker):
        for step in range(500):
            dash(_metrics(worker, step, loss=float(step)))

    threads = [threading.Thread(target=feed, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dash.finish()
    assert len(dash.records) == 2000
    for w in range(4):
        assert list(dash.figure.data[w].x) == list(range(500))


def test_long_series_are_downsampled_for_display_but_kept_whole():
    dash = Dashboard(1, max_points=500)
    dash(WorkerMetrics(0, tuple({"step": s, "loss": float(s % 97)} for s in range(20_000))))
    dash.finish()
    assert len(dash.figure.data[0].x) <= 500
    assert len(dash.records) == 20_000
    frame = dash.dataframe()
    assert len(frame) == 20_000 and frame["loss"].max() == 96.0


def test_static_bundle_renders_without_a_kernel():
    dash = Dashboard(2)
    for step in range(3):
        dash(_metrics(0, step, loss=1.0, global_loss=1.5))
        dash(_metrics(1, step, loss=2.0, global_loss=1.5))
    dash.finish()
    bundle = dash.static_bundle()
    fig_json = bundle["application/vnd.plotly.v1+json"]
    assert [t["name"] for t in fig_json["data"]][:2] == ["worker 0 (local loss)", "worker 1 (local loss)"]
    assert "worker 0" in bundle["text/plain"]
    # the HTML holds the picture (GitHub, offline) and a script that swaps in plotly when it can
    html = bundle["text/html"]
    assert html.count("<svg") == 1 and "Plotly.newPlot" in html and "cdn.plot.ly/plotly-" in html
    assert bundle["image/svg+xml"] in html


def test_svg_picture_has_one_line_per_series_with_every_displayed_point():
    import xml.etree.ElementTree as ET

    dash = Dashboard(2, max_points=100)
    for step in range(1000):
        dash(_metrics(0, step, loss=1.0 / (step + 1), global_loss=0.5))
        dash(_metrics(1, step, loss="NaN" if step == 10 else 2.0 / (step + 1), global_loss=0.5))
    dash.finish()
    root = ET.fromstring(dash.svg())
    lines = {el.get("data-name"): el.get("points").split() for el in root.iter("{http://www.w3.org/2000/svg}polyline")}
    assert set(lines) == {"worker 0 (local loss)", "worker 1 (local loss)", "global loss (all workers)"}
    assert len(lines["worker 0 (local loss)"]) == len(dash.figure.data[0].x) <= 100
    assert len(lines["worker 1 (local loss)"]) <= 100  # the NaN point is left out, not drawn at 0
    for points in lines.values():
        for point in points:
            x, y = map(float, point.split(","))
            assert 0 <= x <= 720 and 0 <= y <= 320


def test_svg_of_an_empty_run_is_still_a_picture():
    import xml.etree.ElementTree as ET

    ET.fromstring(Dashboard(1).svg())


def test_finish_replaces_the_live_picture_by_the_static_copy_under_the_same_display_ids():
    """In a kernel, display ids let finish() swap the live SVG picture for the static bundle."""
    dash = Dashboard(1)
    updates = _shown(dash)
    dash(_metrics(0, 0, loss=1.0))
    live = [u for u in updates if u[0] == "chart"]
    assert len(live) == 1 and "mw-live-chart" in live[0][2]["text/html"] and "<polyline" in live[0][2]["text/html"]
    assert "application/vnd.plotly.v1+json" not in live[0][2], "no plotly.js drawing while the run goes on"
    dash.finish()
    assert [u[0] for u in updates[-2:]] == ["chart", "status"]
    assert "application/vnd.plotly.v1+json" in updates[-2][2] and updates[-2][1] is True
    assert "mw-status" in updates[-1][2]["text/html"]
    dash(_metrics(0, 1, loss=0.5))  # a late event adds to the data, not to the page
    assert len(updates) == 4 and len(dash.records) == 2


def test_rejects_empty_cluster():
    with pytest.raises(ValueError):
        Dashboard(0)


def test_how_a_run_ended_survives_the_restart_that_follows_a_failure():
    dash = Dashboard(2)
    dash(WorkerStateChanged(0, "running"))
    dash(WorkerStateChanged(1, "running"))
    dash(WorkerStateChanged(1, "failed", error="ValueError"))
    dash(WorkerStateChanged(0, "failed", error="KeyboardInterrupt"))
    for w in range(2):  # the cluster restarts the group after the failure
        dash(WorkerStateChanged(w, "starting"))
        dash(WorkerStateChanged(w, "idle"))
    assert [(r["state"], r["error"]) for r in dash.status_rows()] == [
        ("failed", "KeyboardInterrupt"), ("failed", "ValueError")]
    dash(WorkerStateChanged(1, "running"))  # a new run on the same dashboard starts afresh
    assert dash.status_rows()[1]["state"] == "running" and dash.status_rows()[1]["error"] == ""


# -- the live widget's feed (frontend/chart/feed.py): what each update carries ------------------

def _decode(message):
    """(content, {(plot, series): (xs, ys)}) of one update, as js/src/store.js reads it."""
    import numpy as np

    content, buffers = message
    values = np.frombuffer(buffers[0], dtype=np.float32)
    lines, at = {}, 0
    for plot, series, n in content["chunks"]:
        lines[(plot, series)] = (values[at:at + n].tolist(), values[at + n:at + 2 * n].tolist())
        at += 2 * n
    assert at == len(values)
    return content, lines


def _size(message):
    import json

    content, buffers = message
    return len(json.dumps(content)) + sum(len(b) for b in buffers)


def test_feed_sends_only_new_points_and_nothing_when_nothing_changed():
    from mwnotebook.frontend.chart.feed import LiveFeed

    feed = LiveFeed(2)
    for step in range(3):
        for w in range(2):
            feed.add(w, [{"step": step, "loss": 1.0 + w + step, "global_loss": 0.5 + step}])
    content, lines = _decode(feed.message())
    assert content["plots"] == [[0, "loss", "step", ""]]
    assert lines[(0, 0)] == ([0, 1, 2], [1, 2, 3]) and lines[(0, 2)] == ([0, 1, 2], [0.5, 1.5, 2.5])
    assert feed.message() is None
    feed.add(1, [{"step": 3, "loss": 9.0}])
    content, lines = _decode(feed.message())
    assert lines == {(0, 1): ([3.0], [9.0])} and "plots" not in content
    key, lines = _decode(feed.message(key=True))  # a key frame: everything so far
    assert key["key"] is True and lines[(0, 1)][0] == [0, 1, 2, 3] and key["plots"]


def test_feed_update_for_eight_fast_workers_stays_near_one_kilobyte():
    from mwnotebook.frontend.chart.feed import LiveFeed

    feed = LiveFeed(8)
    sizes, step = [], 0
    for _update in range(50):  # 1,000 steps/s per worker, 5 updates a second: 200 steps each
        for w in range(8):
            feed.add(w, [{"step": s, "kind": "batch", "epoch": s // 1000, "loss": 1 / (s + 1), "accuracy": 0.5,
                          "global_loss": 1 / (s + 2), "global_accuracy": 0.5} for s in range(step, step + 200)])
        step += 200
        sizes.append(_size(feed.message()))
    assert max(sizes[1:]) <= 2000, sizes  # the first one carries the plots' headers too
    content, lines = _decode(feed.message(key=True))
    assert content["epochs"] == [[0, 0], [1000, 1], [2000, 2], [3000, 3], [4000, 4], [5000, 5],
                                 [6000, 6], [7000, 7], [8000, 8], [9000, 9]]
    assert [p[3] for p in content["plots"]] == ["Keras' running mean over the epoch (restarts at each epoch mark)"] * 2


class _Widget:
    """Stands for the widget's comm: records what is sent and when it is closed."""

    def __init__(self, log):
        self.log = log

    def send(self, content, buffers):
        self.log.append(("send", content, buffers))

    def close(self):
        self.log.append(("close",))


def test_feed_memory_is_bounded_over_a_long_run_and_the_data_keep_every_point():
    from mwnotebook.frontend.chart.feed import HISTORY_CAP, LiveFeed

    sent: list = []
    dash = Dashboard(8, max_updates_per_s=1e9)  # every event is an update: as many as possible
    dash._widget = _Widget(sent)
    for start in range(0, 100_000, 500):
        for w in range(8):
            dash(WorkerMetrics(w, tuple({"step": s, "loss": 1 / (s + 1)} for s in range(start, start + 500))))
    feed: LiveFeed = dash._feed
    assert all(len(line.hist_x) <= 2 * HISTORY_CAP for line in feed.lines.values())
    assert len(sent) >= 1000 and max(_size(m[1:]) for m in sent if m[0] == "send") <= 2000
    assert dash.store.point_count(3, "loss") == 100_000


def test_nan_and_inf_are_gaps_with_one_note_and_text_values_are_left_out():
    from mwnotebook.frontend.chart.feed import LiveFeed

    feed = LiveFeed(2)
    feed.add(0, [{"step": 0, "loss": 1.0}, {"step": 1, "loss": "NaN"}, {"step": 2, "loss": "Infinity"}])
    feed.add(1, [{"step": 0, "loss": "oops"}])
    content, lines = _decode(feed.message())
    import math

    assert lines[(0, 0)][0] == [0, 1, 2] and math.isnan(lines[(0, 0)][1][1]) and math.isinf(lines[(0, 0)][1][2])
    assert (0, 1) not in lines
    assert content["note"].startswith("worker 0 reported loss = nan at step 1")
    feed.add(1, [{"step": 1, "loss": "NaN"}])
    assert "note" not in feed.message()[0], "one note, not one per point"


def test_epoch_only_metrics_get_an_epoch_plot():
    from mwnotebook.frontend.chart.feed import LiveFeed

    feed = LiveFeed(1)
    feed.add(0, [{"step": 1, "kind": "batch", "epoch": 0, "global_loss": 0.7},
                 {"step": 1, "kind": "epoch", "epoch": 0, "global_loss": 0.7, "global_val_loss": 0.6, "global_lr": 0.1}])
    content, lines = _decode(feed.message())
    assert [p[1:3] for p in content["plots"]] == [["loss", "step"], ["val_loss", "epoch"], ["lr", "epoch"]]
    assert lines[(1, 1)] == ([1.0], [pytest.approx(0.6)])


def test_at_the_end_the_static_copy_replaces_the_widget_which_is_then_closed():
    dash = Dashboard(2)
    updates = _shown(dash)
    dash._widget = _Widget(updates)
    dash(_metrics(0, 0, loss=1.0, accuracy=0.5))
    assert [u[0] for u in updates] == ["send", "status"], "a live update sends points, not a picture"
    dash.finish()
    kinds = [u[0] for u in updates]
    assert kinds[-3:] == ["chart", "status", "close"], kinds
    figure = updates[-3][2]["application/vnd.plotly.v1+json"]
    assert {t["name"] for t in figure["data"]} >= {"worker 0 (local loss)", "worker 0 (local accuracy)"}
    assert dash._widget is None


def test_the_saved_figure_leaves_room_between_an_x_axis_title_and_the_next_plots_title():
    """The x-axis title ("step") of a plot and the title of the plot below stood level (the gap
    was a fixed share of the figure). Seen on the figure rendered by plotly.js: its tick labels and
    axis title take about 45 px under a plot, the next plot's title about 18 px above it."""
    from mwnotebook.frontend.chart.plotly_figure import plots_figure_dict
    from mwnotebook.frontend.chart.plots import ChartPlot
    from mwnotebook.frontend.chart.series import ChartSeries

    for n in (2, 3, 6):
        series = [ChartSeries("worker 0 (local m)", "#1f77b4", "", [1.0, 2.0], [1.0, 0.5])]
        layout = plots_figure_dict([ChartPlot(f"m{i}", "step", series) for i in range(n)], "run")["layout"]
        plot_px = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
        domains = [layout[f"yaxis{'' if i == 0 else i + 1}"]["domain"] for i in range(n)]
        for upper, lower in zip(domains, domains[1:]):
            assert (upper[0] - lower[1]) * plot_px >= 80, (n, domains)
        assert min(top - bottom for bottom, top in domains) * plot_px >= 180, "each plot keeps its height"
        assert layout["legend"]["yanchor"] == "top" and layout["legend"]["y"] * plot_px <= -60, "under the last title"


def test_the_end_state_of_a_long_eight_worker_run_stays_small():
    import json

    dash = Dashboard(8)
    dash._widget = _Widget([])
    for w in range(8):
        dash(WorkerMetrics(w, tuple({"step": s, "loss": 1 / (s + 1) + w, "accuracy": 0.5, "global_loss": 0.3}
                                    for s in range(20_000))))
    dash.finish()
    bundle = dash.static_bundle()
    assert len(json.dumps(bundle)) <= 200_000, len(json.dumps(bundle))
    assert len(dash.dataframe()) == 160_000


def test_loss_is_the_first_plot_whatever_order_the_keys_come_in():
    from mwnotebook.frontend.chart.feed import LiveFeed

    for keys in (("accuracy", "loss", "lr"), ("lr", "global_loss", "accuracy")):
        feed = LiveFeed(1)
        feed.add(0, [{"step": 0, **{k: 1.0 for k in keys}}])
        names = [p[1] for p in feed.message()[0]["plots"]]
        assert names[0] == "loss" and names[-1] == "lr", names


def test_a_restart_keeps_one_run_along_the_x_axis_and_marks_where_it_went_on():
    """--max-restarts: the resumed attempt redoes steps 4-5 after resuming from a backup at step 4.
    The widget's lines forget the lost attempt's points from there (a key frame tells the page), the
    store's series too, and the restart is marked at the step where the run went on."""
    import numpy as np

    from mwnotebook.frontend.chart.feed import LiveFeed
    from mwnotebook.shared.events import RunRestarted
    from mwnotebook.shared.metrics import MetricsStore

    feed, store = LiveFeed(1), MetricsStore()
    first = [{"worker": 0, "step": s, "loss": 1.0 / s} for s in range(1, 6)]
    rows, columns = store.add_batch(0, first)
    feed.add_columns(0, rows, columns)
    assert feed.message() is not None
    store.add_restart("worker 0 died (SIGKILL)")
    feed.restart()
    again = [{"worker": 0, "step": s, "loss": 0.5 / s} for s in range(4, 7)]
    rows, columns = store.add_batch(0, again)
    feed.add_columns(0, rows, columns)
    content, buffers = feed.message()
    assert content["key"] is True and content["restarts"] == [4.0]
    floats = np.frombuffer(buffers[0], dtype=np.float32)
    [(plot, index, n)] = content["chunks"]
    xs = floats[:n].tolist()
    assert xs == sorted(xs) and xs == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    steps, _ = store.local_series(0, "loss")
    assert steps.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    [mark] = store.restart_marks()
    assert mark.step == 4.0 and mark.replaced_points == 2

    board = Dashboard(1)
    board(WorkerMetrics(worker=0, records=tuple(first)))
    board(RunRestarted(cause="worker 0 died (SIGKILL)", worker=0, restart=1, max_restarts=3))
    assert len(board._store.restart_marks()) == 1
