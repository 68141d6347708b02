"""Every metric of a run as plots of plain data (the end state's figure and picture).

Step plots come from step and batch records (x = step), epoch plots from metrics only seen in
epoch summaries (``val_*``, or every metric of a ``--ps`` coordinator's ``fit``, which reports epochs
only; x = epoch from 1). The dashboard's own metric (``loss``) comes first,
the learning rate last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mwnotebook.frontend.chart.series import (
    GLOBAL_COLOUR,
    ChartSeries,
    _points,
    chart_series,
    global_series_name,
    trace_colour,
)
from mwnotebook.shared.metrics import GLOBAL_PREFIX, MetricsStore

_LAST = ("lr", "learning_rate")


@dataclass(frozen=True)
class ChartPlot:
    metric: str
    axis: str  # "step" | "epoch"
    series: list[ChartSeries]
    note: str = ""  # what is drawn, e.g. Keras' running mean (frontend/chart/feed.py plot_note)


def _bare(name: str) -> str:
    return name[len(GLOBAL_PREFIX):] if name.startswith(GLOBAL_PREFIX) else name


def _ordered(names: set[str], first: str) -> list[str]:
    return sorted(names, key=lambda m: (m != first, m in _LAST, m))


def chart_plots(store: MetricsStore, num_workers: int, first: str = "loss", *,
                 max_points: int | None = None, names: Sequence[str] | None = None,
                 notes: Mapping[tuple[str, str], str] | None = None) -> list[ChartPlot]:
    """One plot per metric; ``names(metric)``-style worker names come from ``names`` (a worker's
    legend name with ``{metric}`` in it, e.g. "worker 1 (local {metric}) - failed: ValueError")."""
    step_metrics = {_bare(m) for m in store.metric_names()}
    epoch_metrics = {_bare(m) for m in store.epoch_metric_names()} - step_metrics
    if not step_metrics and not epoch_metrics:
        step_metrics = {first}  # nothing reported: the dashboard's own plot, empty
    plots = []
    for metric in _ordered(step_metrics, first):
        worker_names = [n.format(metric=metric) for n in names] if names is not None else None
        plots.append(ChartPlot(metric, "step", chart_series(store, metric, num_workers, max_points=max_points,
                                                              names=worker_names),
                                 (notes or {}).get((metric, "step"), "")))
    for metric in _ordered(epoch_metrics, first):
        series = []
        for w in range(num_workers):
            x, y = _points(*store.epoch_series(w, metric), max_points)
            name = names[w].format(metric=metric) if names is not None else f"worker {w} (local {metric})"
            series.append(ChartSeries(name, trace_colour(w), "", x, y, visible=bool(x)))
        gx, gy = _points(*store.epoch_series(None, metric), max_points)
        series.append(ChartSeries(global_series_name(metric), GLOBAL_COLOUR, "4 3", gx, gy,
                                  visible=bool(gx), is_global=True))
        plots.append(ChartPlot(metric, "epoch", series, (notes or {}).get((metric, "epoch"), "")))
    return plots
