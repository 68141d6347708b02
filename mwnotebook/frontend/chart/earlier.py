"""Earlier runs of the same cell, drawn faintly under the live curves: their data and how they travel.

At the end of a run the chart gives a *snapshot* (:func:`snapshot`): per plot (metric and axis)
one line, the global value where the workers reported one, else the first line that has points,
reduced to at most :data:`SNAPSHOT_POINTS` points by averaging equal groups (a faint reference
line needs its shape, not every step). It is plain JSON (numbers, strings, ``None`` for a gap), a
few kilobytes per metric; the run history (``mwnotebook/experiments/history.py``) keeps it as it
is and hands it back with the run's number for the next run of the cell.

Into the page an earlier run goes once per chart, with the widget's synced state
(``mwnotebook/frontend/chart/widget.py``: a JSON header and one float32 buffer), not with every
update: state reaches the page with the widget itself, whereas a custom message sent before the
widget's JavaScript loaded is lost. ``js/src/earlier.js`` reads it back.

Whatever a snapshot holds is checked here (:func:`earlier_run`): a snapshot of another version, or
one a hand edit broke, is left out with a debug log line, never an error in the user's cell.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mwnotebook.frontend.chart.plots import ChartPlot
from mwnotebook.frontend.chart.series import ChartSeries

log = logging.getLogger(__name__)

#: The snapshot's format; a snapshot of another version is not drawn.
SNAPSHOT_VERSION = 1
#: Points per metric in a snapshot (the live plot is ~600 pixels wide; a faint line needs its shape).
SNAPSHOT_POINTS = 200
#: Points of all earlier runs together in the widget's first message (float32 x and y: ~8 bytes each),
#: e.g. 3 runs of 5 metrics at 200 points; the chart's module itself is ~70 kB of a ~100 kB budget.
OVERLAY_POINTS = 3000
#: A thinned line keeps at least this many points (its shape, roughly).
MIN_LINE_POINTS = 20
#: The colours of earlier runs, the latest first: greys, so they never look like a worker's line.
EARLIER_COLOURS = ("#555555", "#7a7a7a", "#9a9a9a", "#b4b4b4")


@dataclass(frozen=True)
class EarlierLine:
    """One plot's line of an earlier run (``y`` NaN where the run had a gap)."""

    metric: str
    axis: str  # "step" | "epoch"
    x: tuple[float, ...]
    y: tuple[float, ...]


@dataclass(frozen=True)
class EarlierRun:
    """An earlier run of the cell as the chart draws it: its number and one line per plot."""

    number: int
    lines: tuple[EarlierLine, ...]

    @property
    def label(self) -> str:
        return f"run {self.number}"

    def line(self, metric: str, axis: str) -> EarlierLine | None:
        return next((line for line in self.lines if line.metric == metric and line.axis == axis), None)


def reduce_points(xs: Sequence[float], ys: Sequence[float], limit: int) -> tuple[list[float], list[float]]:
    """At most ``limit`` points: equal groups averaged (x and the finite y values; a group with no
    finite y is a gap, NaN)."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    if len(xs) <= limit:
        return [float(x) for x in xs], [float(y) for y in ys]
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    starts = np.linspace(0, len(x), limit + 1).astype(np.int64)
    finite = np.isfinite(y)
    counts = np.add.reduceat(finite.astype(float), starts[:-1])
    sums = np.add.reduceat(np.where(finite, y, 0.0), starts[:-1])
    gx = np.add.reduceat(x, starts[:-1]) / np.diff(starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        gy = np.where(counts > 0, sums / counts, np.nan)
    return gx.tolist(), gy.tolist()


def _short(value: float) -> float | None:
    """A JSON number with 6 significant digits (None: a gap)."""
    return float(f"{value:.6g}") if math.isfinite(value) else None


def _line_of(plot: ChartPlot) -> ChartSeries | None:
    """The line that stands for a run in ``plot``: the global one, else the first with points."""
    glob = next((s for s in plot.series if s.is_global and s.x), None)
    return glob or next((s for s in plot.series if not s.is_global and s.x), None)


def snapshot(plots: Sequence[ChartPlot], limit: int = SNAPSHOT_POINTS) -> dict[str, Any] | None:
    """The run as its later runs draw it (see the module docstring); ``None`` when nothing was drawn."""
    out = []
    for plot in plots:
        series = _line_of(plot)
        if series is None:
            continue
        xs, ys = reduce_points(series.x, series.y, limit)
        out.append({"metric": plot.metric, "axis": plot.axis, "line": series.name,
                    "x": [_short(x) for x in xs], "y": [_short(y) for y in ys]})
    return {"version": SNAPSHOT_VERSION, "plots": out} if out else None


def _numbers(values: Any, nulls: bool) -> tuple[float, ...] | None:
    if not isinstance(values, list):
        return None
    out = []
    for v in values:
        if v is None and nulls:
            out.append(math.nan)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
        else:
            return None
    return tuple(out)


def earlier_run(number: int, snap: Mapping[str, Any] | None) -> EarlierRun | None:
    """Run ``number`` from its snapshot (:func:`snapshot`), or None when there is nothing usable."""
    if not isinstance(snap, Mapping) or snap.get("version") != SNAPSHOT_VERSION:
        if snap is not None:
            log.debug("run %s: a chart snapshot of another version (%r) is not drawn", number,
                      snap.get("version") if isinstance(snap, Mapping) else type(snap).__name__)
        return None
    lines = []
    # "panels": the key of snapshots saved before the chart's sub-plots were called plots (the same format)
    for plot in snap.get("plots") or snap.get("panels") or ():
        if not isinstance(plot, Mapping):
            continue
        metric, axis = plot.get("metric"), plot.get("axis")
        xs, ys = _numbers(plot.get("x"), nulls=False), _numbers(plot.get("y"), nulls=True)
        if (not isinstance(metric, str) or axis not in ("step", "epoch") or xs is None or ys is None
                or len(xs) != len(ys) or not xs):
            log.debug("run %s: a broken plot of its chart snapshot is not drawn", number)
            continue
        lines.append(EarlierLine(metric, str(axis), xs, ys))
    return EarlierRun(number, tuple(lines)) if lines else None


def earlier_runs(runs: Iterable[tuple[int, Mapping[str, Any] | None]]) -> list[EarlierRun]:
    """The drawable ones of ``(number, snapshot)`` pairs, in the order given (latest first)."""
    return [run for run in (earlier_run(number, snap) for number, snap in runs) if run is not None]


def earlier_colour(rank: int) -> str:
    """The colour of the ``rank``-th earlier run (0: the latest)."""
    return EARLIER_COLOURS[min(rank, len(EARLIER_COLOURS) - 1)]


def overlay_state(runs: Sequence[EarlierRun], budget: int = OVERLAY_POINTS) -> tuple[list[Any], bytes]:
    """What the widget's synced state carries: a header ``[[number, [[metric, axis, n], ...]], ...]``
    and one float32 buffer holding, line after line, its n x values then its n y values (NaN: a gap).
    At most about ``budget`` points in all: beyond it each line is thinned in the same proportion
    (equal groups averaged), so the widget's first message stays small with many runs or metrics."""
    total = sum(len(line.x) for run in runs for line in run.lines)
    share = min(1.0, budget / total) if total else 1.0
    header: list[Any] = []
    floats: list[float] = []
    for run in runs:
        sizes = []
        for line in run.lines:
            xs, ys = reduce_points(line.x, line.y, max(MIN_LINE_POINTS, int(len(line.x) * share)))
            sizes.append([line.metric, line.axis, len(xs)])
            floats.extend(xs)
            floats.extend(ys)
        header.append([run.number, sizes])
    return header, np.asarray(floats, dtype=np.float32).tobytes()


def with_earlier(plots: Sequence[ChartPlot], runs: Sequence[EarlierRun],
                 max_points: int | None = None) -> list[ChartPlot]:
    """``plots`` with a faint series per earlier run appended (every plot gets one per run, empty
    and hidden where that run had no such metric, so that a figure's legend groups line up)."""
    if not runs:
        return list(plots)
    out = []
    for plot in plots:
        extra = []
        for rank, run in enumerate(runs):
            line = run.line(plot.metric, plot.axis)
            xs, ys = (line.x, line.y) if line is not None else ((), ())
            if max_points is not None and max_points >= 2:
                xs, ys = (tuple(v) for v in reduce_points(xs, ys, max_points))
            extra.append(ChartSeries(f"{run.label} (earlier)", earlier_colour(rank), "", tuple(xs), tuple(ys),
                                     visible=bool(xs), faint=True))
        out.append(replace(plot, series=[*plot.series, *extra]))
    return out
