"""Earlier runs in the chart as data (frontend/chart/earlier.py): the snapshot a run leaves, what a
later run of the cell draws of it, what the widget is sent, and the saved picture (without them
unless asked). The page's side is tests/browser/test_chart_overlay.py."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from mwnotebook.frontend.chart.earlier import (
    SNAPSHOT_POINTS,
    SNAPSHOT_VERSION,
    EarlierRun,
    earlier_run,
    earlier_runs,
    overlay_state,
    reduce_points,
)
from mwnotebook.frontend.chart.live import Dashboard
from mwnotebook.frontend.notebook.live_chart import ChartOnFirstMetric
from mwnotebook.shared.events import WorkerMetrics

SVG = "{http://www.w3.org/2000/svg}"


def _fit(dash, steps: int = 1000, scale: float = 1.0, nan_at: int | None = None) -> None:
    """Two workers' batch losses and accuracies, the global loss, one val_loss per 500 steps."""
    for step in range(steps):
        for w in range(2):
            loss = scale / (1 + 0.01 * step) + 0.01 * w
            record = {"step": step, "kind": "batch", "epoch": step // 500, "loss": loss, "accuracy": 1 - loss / 2,
                      "global_loss": math.nan if step == nan_at else scale / (1 + 0.01 * step)}
            dash(WorkerMetrics(w, (record,)))
    for epoch in range(steps // 500):
        dash(WorkerMetrics(0, ({"kind": "epoch", "epoch": epoch, "global_val_loss": 0.5 * scale / (epoch + 1)},)))


def _snapshot(**kw) -> dict:
    dash = Dashboard(2, use_widget=False)
    _fit(dash, **kw)
    dash.finish()
    snap = dash.snapshot()
    assert snap is not None
    return snap


def test_a_run_leaves_a_small_json_snapshot_with_one_line_per_metric():
    snap = _snapshot(nan_at=10)
    text = json.dumps(snap, allow_nan=False)  # plain JSON: the run history stores it as it is
    assert snap["version"] == SNAPSHOT_VERSION
    plots = {(p["metric"], p["axis"]): p for p in snap["plots"]}
    assert set(plots) == {("loss", "step"), ("accuracy", "step"), ("val_loss", "epoch")}
    # the global line stands for the run where there is one, else the first worker's
    assert plots["loss", "step"]["line"] == "global loss (all workers)"
    assert plots["accuracy", "step"]["line"] == "worker 0 (local accuracy)"
    loss = plots["loss", "step"]
    assert len(loss["x"]) == len(loss["y"]) == SNAPSHOT_POINTS
    assert loss["x"][0] == pytest.approx(2, abs=0.5) and loss["x"][-1] == pytest.approx(997, abs=3)
    assert loss["y"][0] == pytest.approx(1 / 1.02, rel=0.02) and loss["y"][-1] == pytest.approx(1 / 10.97, rel=0.02)
    assert plots["val_loss", "epoch"]["x"] == [1, 2] and plots["val_loss", "epoch"]["y"] == [0.5, 0.25]
    assert len(text) < 20_000, len(text)


def test_a_run_that_drew_nothing_leaves_no_snapshot():
    dash = Dashboard(2, use_widget=False)
    dash.finish()
    assert dash.snapshot() is None
    chart = ChartOnFirstMetric(2)
    assert chart.snapshot() is None, "no metric, no chart, nothing to keep"


def test_an_earlier_run_is_read_back_from_its_snapshot():
    snap = json.loads(json.dumps(_snapshot()))  # as the history gives it back from its file
    run = earlier_run(7, snap)
    assert run is not None and run.label == "run 7"
    loss = run.line("loss", "step")
    assert loss is not None and len(loss.x) == SNAPSHOT_POINTS
    assert run.line("val_loss", "epoch").y == (0.5, 0.25)
    assert run.line("loss", "epoch") is None


def test_reduce_points_averages_equal_groups_and_a_group_of_gaps_stays_a_gap():
    xs = list(range(1000))
    ys = [float(x) for x in xs]
    ys[100:110] = [math.nan] * 10
    rx, ry = reduce_points(xs, ys, 100)
    assert len(rx) == len(ry) == 100
    assert rx[0] == 4.5 and ry[0] == 4.5  # the mean of 0..9
    assert math.isnan(ry[10]), "every value of that group was a gap"
    assert reduce_points([1, 2], [3, 4], 10) == ([1.0, 2.0], [3.0, 4.0])
    with pytest.raises(ValueError):
        reduce_points(xs, ys, 1)


@pytest.mark.parametrize("snap", [
    None,
    {"version": SNAPSHOT_VERSION + 1, "plots": [{"metric": "loss", "axis": "step", "x": [1], "y": [1]}]},
    "not a snapshot",
    {"version": SNAPSHOT_VERSION, "plots": [{"metric": "loss", "axis": "step", "x": [1, 2], "y": [1]}]},
    {"version": SNAPSHOT_VERSION, "plots": [{"metric": "loss", "axis": "sideways", "x": [1], "y": [1]}]},
    {"version": SNAPSHOT_VERSION, "plots": [{"metric": "loss", "axis": "step", "x": [True], "y": [1]}]},
    {"version": SNAPSHOT_VERSION, "plots": [{"metric": "loss", "axis": "step", "x": [None], "y": [1]}]},
    {"version": SNAPSHOT_VERSION, "plots": [{"metric": 3, "axis": "step", "x": [1], "y": [1]}]},
    {"version": SNAPSHOT_VERSION, "plots": []},
], ids=["none", "other version", "a string", "lengths differ", "bad axis", "bool", "x gap", "bad metric", "empty"])
def test_a_snapshot_that_cannot_be_drawn_is_left_out(snap):
    good = {"version": SNAPSHOT_VERSION, "plots": [{"metric": "loss", "axis": "step", "x": [1, 2], "y": [0.5, None]}]}
    runs = earlier_runs([(3, snap), (2, good)])
    assert [r.number for r in runs] == [2]
    assert runs[0].line("loss", "step").x == (1.0, 2.0) and math.isnan(runs[0].line("loss", "step").y[1])


def test_a_snapshot_saved_before_plots_were_called_plots_is_still_drawn():
    """Run histories written before the rename keep their chart under the key "panels"."""
    old = {"version": SNAPSHOT_VERSION, "panels": [{"metric": "loss", "axis": "step", "x": [1, 2], "y": [0.5, 0.4]}]}
    [run] = earlier_runs([(4, old)])
    assert run.line("loss", "step").x == (1.0, 2.0)


def test_the_widget_gets_each_earlier_run_once_as_a_header_and_one_float32_buffer():
    runs = earlier_runs([(3, _snapshot(scale=2.0)), (1, _snapshot())])
    header, data = overlay_state(runs)
    assert [h[0] for h in header] == [3, 1]
    values = np.frombuffer(data, dtype=np.float32)
    at = 0
    seen = {}
    for number, lines in header:  # as js/src/earlier.js reads it
        for metric, axis, n in lines:
            seen[(number, metric, axis)] = (values[at:at + n], values[at + n:at + 2 * n])
            at += 2 * n
    assert at == len(values)
    xs, ys = seen[(3, "val_loss", "epoch")]
    assert xs.tolist() == [1, 2] and ys.tolist() == [1.0, 0.5]
    assert len(data) + len(json.dumps(header)) < 12_000, "two runs of three metrics stay small"


def _traces(bundle) -> dict:
    return {t["name"]: t for t in bundle["application/vnd.plotly.v1+json"]["data"]}


def _earlier_lines(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return [el.get("data-name") for el in root.iter(f"{SVG}polyline") if "mw-earlier" in (el.get("class") or "")]


def test_the_saved_picture_shows_this_run_only_unless_asked():
    runs = earlier_runs([(2, _snapshot(scale=2.0))])
    plain = Dashboard(2, use_widget=False, earlier_runs=runs)
    _fit(plain)
    plain.finish()
    bundle = plain.static_bundle()
    assert not any("earlier" in name for name in _traces(bundle)), "off for the saved picture by default"
    assert _earlier_lines(bundle["image/svg+xml"]) == []

    asked = Dashboard(2, use_widget=False, earlier_runs=runs, earlier_in_picture=True)
    _fit(asked)
    asked.finish()
    bundle = asked.static_bundle()
    traces = _traces(bundle)
    faint = traces["run 2 (earlier)"]
    assert faint["opacity"] < 1 and faint["line"]["width"] < traces["worker 0 (local loss)"]["line"]["width"]
    svg = bundle["image/svg+xml"]
    assert _earlier_lines(svg) == ["run 2 (earlier)"] * 3, "one faint line per plot (loss, accuracy, val_loss)"
    labels = [el.text for el in ET.fromstring(svg).iter(f"{SVG}text") if el.get("class") == "mw-earlier-label"]
    assert labels == ["run 2"] * 3
    assert len(json.dumps(bundle)) < 1.3 * len(json.dumps(plain.static_bundle())), "a few kB more, not a copy"


def test_the_live_picture_without_a_widget_draws_earlier_runs_under_the_live_lines():
    runs = earlier_runs([(5, _snapshot(scale=2.0)), (4, _snapshot(scale=3.0))])
    dash = Dashboard(2, use_widget=False, earlier_runs=runs)
    _fit(dash, steps=300)  # this run is shorter so far: the earlier ones go on beyond it
    svg = dash.live_chart_bundle()["text/html"]
    root = ET.fromstring(svg[svg.index("<svg"):svg.rindex("</svg>") + 6])
    names = [el.get("data-name") for el in root.iter(f"{SVG}polyline")]
    # per plot the earlier runs come first (drawn underneath), then the workers and the global line
    assert names[:3] == ["run 5 (earlier)", "run 4 (earlier)", "worker 0 (local loss)"], names


def test_the_chart_sink_hands_drawable_earlier_runs_to_its_dashboard_and_gives_its_snapshot():
    made = []

    class FakeDashboard:
        def __init__(self, workers, **options):
            self.options = options
            made.append(self)

        def display(self):
            pass

        def __call__(self, event):
            pass

        def finish(self):
            pass

        def snapshot(self):
            return {"version": SNAPSHOT_VERSION, "plots": []}

    good = {"version": SNAPSHOT_VERSION, "plots": [{"metric": "loss", "axis": "step", "x": [1], "y": [0.5]}]}
    chart = ChartOnFirstMetric(2, factory=FakeDashboard, earlier_runs=[(4, None), (3, good)], earlier_in_picture=True)
    assert chart.snapshot() is None
    chart(WorkerMetrics(0, ({"step": 1, "loss": 0.5},)))
    [dash] = made
    assert [r.number for r in dash.options["earlier_runs"]] == [3], "a run without a chart is left out"
    assert all(isinstance(r, EarlierRun) for r in dash.options["earlier_runs"])
    assert dash.options["earlier_in_picture"] is True
    assert chart.snapshot() == {"version": SNAPSHOT_VERSION, "plots": []}

    made.clear()
    ChartOnFirstMetric(2, factory=FakeDashboard, earlier_runs=[(1, None)])(WorkerMetrics(0, ({"step": 1, "loss": 1},)))
    assert made[0].options == {}, "nothing drawable: the chart is made as before"


class _FittingCluster:
    """Started already; each ``run`` reports a falling loss on two workers, scaled per run."""

    started = True

    def __init__(self) -> None:
        self.runs = 0

    def run(self, code, on_event=None, timeout=None, max_restarts=None):
        self.runs += 1
        for step in range(50):
            for w in range(2):
                on_event(WorkerMetrics(w, ({"step": step, "loss": self.runs / (1 + step), "global_loss": 1 / (1 + step)},)))
        return None


def test_mwtrain_keeps_each_runs_snapshot_and_draws_the_earlier_runs_of_the_same_cell(monkeypatch, capsys):
    from mwnotebook.frontend.notebook import magics

    cluster = _FittingCluster()

    class Session(magics.NotebookSession):
        def cluster_for(self, spec):
            return cluster

        def announce(self, running):
            pass

    charts = []

    def chart(*args, **kw):
        charts.append(ChartOnFirstMetric(*args, **kw))
        return charts[-1]

    monkeypatch.setattr(magics, "ChartOnFirstMetric", chart)
    cell = magics.MWMagics(None, session=Session())
    for line in ("--workers 2 --cpu", "--workers 2 --cpu", "--workers 2 --cpu --compare 1 --compare-saved"):
        cell.mwtrain(line, "model.fit(x)\n")
    cell.mwtrain("--workers 2 --cpu", "another_cell()\n")
    runs = cell.session.runs.records()
    assert [r.chart is not None for r in runs] == [True] * 4, "every run keeps its chart's snapshot"
    drawn = [[r.number for r in c.dashboard.earlier_runs] for c in charts]
    assert drawn == [[], [1], [2], []], "the same cell's earlier runs, latest first, at most --compare; not another cell's"
    assert [c.dashboard.earlier_in_picture for c in charts] == [False, False, True, False]
    json.dumps([r.chart for r in runs], allow_nan=False)


@pytest.mark.parametrize("value", ["-1", "three", "1.5"])
def test_a_bad_compare_count_is_a_usage_error_naming_it(value):
    from IPython.core.error import UsageError

    from mwnotebook.frontend.notebook import magics

    with pytest.raises(UsageError, match=f"--compare: '{value}' is not a number of runs"):
        magics.mwtrain_parser().parse_args(["--workers", "2", "--compare", value])


def test_many_earlier_runs_of_many_metrics_are_thinned_to_keep_the_first_message_small():
    from mwnotebook.frontend.chart.earlier import OVERLAY_POINTS, EarlierLine

    xs = tuple(float(i) for i in range(200))
    lines = tuple(EarlierLine(f"metric{m}", "step", xs, tuple(1.0 / (1 + x) for x in xs)) for m in range(10))
    runs = [EarlierRun(n, lines) for n in (5, 4, 3)]  # 6,000 points
    header, data = overlay_state(runs)
    sizes = [n for _, lines in header for _, _, n in lines]
    assert sum(sizes) <= OVERLAY_POINTS and min(sizes) == max(sizes) == 100, sizes
    assert len(data) == 8 * sum(sizes) <= 24_000
    values = np.frombuffer(data, dtype=np.float32)
    assert values[0] == 0.5 and values[99] == 198.5, "groups of two averaged, the line's span kept"
    small = overlay_state(runs[:1], budget=10_000)[0]
    assert [n for _, _, n in small[0][1]] == [200] * 10, "within the budget nothing is thinned"


def test_a_run_whose_first_line_reported_nothing_is_kept_by_the_line_that_did():
    dash = Dashboard(3, use_widget=False)  # e.g. a --ps coordinator (line 0) that reports no loss itself
    for step in range(10):
        dash(WorkerMetrics(2, ({"step": step, "loss": 1 / (1 + step)},)))
    dash.finish()
    [plot] = dash.snapshot()["plots"]
    assert plot["line"] == "worker 2 (local loss)" and len(plot["x"]) == 10, plot
