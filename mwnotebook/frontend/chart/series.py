"""What the per-worker chart shows, as plain data: one series per worker and the global one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mwnotebook.shared.metrics import MetricsStore, downsample

_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
GLOBAL_COLOUR = "#000000"
#: How pale an earlier run's line is (frontend/chart/earlier.py), in the figure and the picture.
FAINT_OPACITY = 0.5


@dataclass(frozen=True)
class ChartSeries:
    """One line of the chart: its legend name, style and (downsampled) points."""

    name: str
    colour: str
    dash: str  # SVG stroke-dasharray, "" for a solid line
    x: tuple[float, ...]
    y: tuple[float, ...]
    visible: bool = True
    is_global: bool = False
    #: An earlier run of the cell (frontend/chart/earlier.py): drawn thin and pale, under the others.
    faint: bool = False


def trace_colour(worker: int) -> str:
    return _PALETTE[worker % len(_PALETTE)]


def worker_series_name(worker: int, metric: str, failed_error: str | None = None) -> str:
    name = f"worker {worker} (local {metric})"
    return name if failed_error is None else f"{name} - failed: {failed_error or 'error'}"


def global_series_name(metric: str) -> str:
    return f"global {metric} (all workers)"


def _points(x: Any, y: Any, max_points: int | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if max_points is not None:
        x, y = downsample(x, y, max_points)
    return tuple(map(float, x)), tuple(map(float, y))


def chart_series(store: MetricsStore, metric: str, num_workers: int, *, max_points: int | None = None,
                 names: Sequence[str] | None = None) -> list[ChartSeries]:
    """Every worker's local ``metric`` (coloured) and the global curve (dotted black, hidden while
    no worker reported it). ``names`` overrides the workers' legend names (e.g. "failed: ...")."""
    series = []
    for w in range(num_workers):
        x, y = _points(*store.local_series(w, metric), max_points)
        name = names[w] if names is not None else worker_series_name(w, metric)
        series.append(ChartSeries(name, trace_colour(w), "", x, y))
    gx, gy = _points(*store.global_series(metric), max_points)
    series.append(ChartSeries(global_series_name(metric), GLOBAL_COLOUR, "4 3", gx, gy,
                              visible=bool(gx), is_global=True))
    return series
