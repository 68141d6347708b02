"""The interactive copy of the chart: plotly's JSON figure format, written by hand (no plotly import
on the live path), and a ``go.Figure`` of it for who wants one (``mwnotebook run``'s report)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mwnotebook.frontend.chart.plots import ChartPlot
from mwnotebook.frontend.chart.series import FAINT_OPACITY, ChartSeries, chart_series
from mwnotebook.shared.metrics import MetricsStore

#: A stacked figure's plots (``plots_figure_dict``): each plot's height, and the room between two,
#: in pixels: the upper plot's tick labels and x-axis title, then the lower plot's title, apart.
#: As a fixed share of the figure (6 %, before) the gap shrank with the plot count, and the upper
#: x-axis title ("step") sat level with the next plot's title.
PLOT_PX = 200
PLOT_GAP_PX = 90
#: How far below the last plot the shared legend starts: under that plot's x-axis title.
LEGEND_DROP_PX = 70


def figure_dict(series: Sequence[ChartSeries], title: str, metric: str) -> dict[str, Any]:
    """A plotly figure (``{"data": [...], "layout": {...}}``) of the series, plain JSON types."""
    data = []
    for s in series:
        line: dict[str, Any] = {"color": s.colour, "width": 2.5 if s.is_global else 1 if s.faint else 1.5}
        if s.dash:
            line["dash"] = "dot"
        trace = {"type": "scatter", "mode": "lines", "name": s.name, "x": list(s.x),
                 "y": [float(f"{v:.6g}") if math.isfinite(v) else None for v in s.y],
                 "line": line, "visible": s.visible}
        if s.faint:
            trace["opacity"] = FAINT_OPACITY
        data.append(trace)
    layout = {
        "title": {"text": title},
        "xaxis": {"title": {"text": "step"}},
        "yaxis": {"title": {"text": metric}},
        "height": 360,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 45},
        "legend": {"orientation": "h", "y": -0.2},
        "template": {"layout": {"plot_bgcolor": "white", "paper_bgcolor": "white",
                                "xaxis": {"gridcolor": "#EBF0F8", "zeroline": False},
                                "yaxis": {"gridcolor": "#EBF0F8", "zeroline": False}}},
    }
    return {"data": data, "layout": layout}


def _epoch_shapes(plot: ChartPlot, suffix: str, epochs: Sequence[tuple[float, int]]) -> list[dict[str, Any]]:
    if plot.axis != "step":
        return []
    return [{"type": "line", "xref": f"x{suffix}", "yref": f"y{suffix} domain", "x0": step, "x1": step,
             "y0": 0, "y1": 1, "line": {"color": "#999", "width": 1, "dash": "dot"}}
            for step, epoch in epochs if epoch > 0]


def plots_figure_dict(plots: Sequence[ChartPlot], title: str,
                       epochs: Sequence[tuple[float, int]] = ()) -> dict[str, Any]:
    """Every plot as a subplot, stacked, sharing one legend (a legend click hides a worker in every
    plot), epochs as dotted lines, each plot titled with what it draws. One plot:
    :func:`figure_dict` plus the epochs."""
    if len(plots) == 1:
        figure = figure_dict(plots[0].series, title + (f" ({plots[0].note})" if plots[0].note else ""),
                             plots[0].metric)
        figure["layout"]["xaxis"]["title"]["text"] = plots[0].axis
        figure["layout"]["shapes"] = _epoch_shapes(plots[0], "", epochs)
        return figure
    n = len(plots)
    layout = figure_dict([], title, "")["layout"]
    plot_px = n * PLOT_PX + (n - 1) * PLOT_GAP_PX  # the stack, without the figure's margins
    layout["height"] = plot_px + layout["margin"]["t"] + layout["margin"]["b"]
    data: list[dict[str, Any]] = []
    layout["shapes"], layout["annotations"] = [], []
    for i, plot in enumerate(plots):
        suffix = "" if i == 0 else str(i + 1)
        top = 1 - i * (PLOT_PX + PLOT_GAP_PX) / plot_px
        layout[f"xaxis{suffix}"] = {"title": {"text": plot.axis}, "anchor": f"y{suffix}",
                                    "domain": [0, 1], "gridcolor": "#EBF0F8"}
        layout[f"yaxis{suffix}"] = {"title": {"text": plot.metric}, "anchor": f"x{suffix}",
                                    "domain": [top - PLOT_PX / plot_px, top], "gridcolor": "#EBF0F8"}
        layout["shapes"] += _epoch_shapes(plot, suffix, epochs)
        layout["annotations"].append({"text": plot.metric + (f" - {plot.note}" if plot.note else ""),
                                      "xref": "paper", "yref": "paper", "x": 0, "y": top, "xanchor": "left",
                                      "yanchor": "bottom", "showarrow": False, "font": {"size": 12}})
        for index, trace in enumerate(figure_dict(plot.series, title, plot.metric)["data"]):
            trace.update(xaxis=f"x{suffix}", yaxis=f"y{suffix}", legendgroup=f"series{index}",
                         showlegend=i == 0)
            data.append(trace)
    layout["legend"] = {"orientation": "h", "y": -LEGEND_DROP_PX / plot_px, "yanchor": "top"}
    return {"data": data, "layout": layout}


def as_plotly_figure(figure: dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    return go.Figure(figure)


def per_worker_figure(store: MetricsStore, metric: str, num_workers: int, *, title: str | None = None,
                      max_points: int | None = None, names: Sequence[str] | None = None) -> Any:
    """The chart of ``metric`` as a ``go.Figure``: one coloured trace per worker (its local values;
    ``names``: the workers' legend names) and the global curve dotted in black, hidden while no
    worker has reported it."""
    series = chart_series(store, metric, num_workers, max_points=max_points, names=names)
    return as_plotly_figure(figure_dict(series, title or f"{metric} per worker", metric))
