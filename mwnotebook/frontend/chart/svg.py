"""The chart as a small self-contained SVG picture: what the live cell shows while training runs
(a few kilobytes the browser draws in milliseconds, no plotly.js) and the fallback picture of a
saved notebook."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np

from mwnotebook.frontend.chart.plots import ChartPlot
from mwnotebook.frontend.chart.series import FAINT_OPACITY, ChartSeries

_MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM = 60, 15, 30, 60


def _marks(plot: ChartPlot, epochs: Sequence[tuple[float, int]]) -> list[tuple[float, str]]:
    return [(step, f"epoch {epoch + 1}") for step, epoch in epochs if epoch > 0] if plot.axis == "step" else []


def svg_plots(plots: Sequence[ChartPlot], title: str, width: int = 720, height: int = 320,
               epochs: Sequence[tuple[float, int]] = ()) -> str:
    """Every plot's picture stacked in one SVG (one ``<g>`` per plot), the run's title on the first."""
    if len(plots) == 1:
        p = plots[0]
        return svg_chart(p.series, title, p.metric, width, height, xlabel=p.axis, marks=_marks(p, epochs))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height * len(plots)}" '
             f'viewBox="0 0 {width} {height * len(plots)}" font-family="sans-serif" font-size="11">']
    for i, p in enumerate(plots):
        name = p.metric + (f" ({p.note})" if p.note else "")
        inner = svg_chart(p.series, name if i else f"{title}: {name}", p.metric, width, height, xlabel=p.axis,
                          marks=_marks(p, epochs))
        inner = inner[inner.index(">") + 1: inner.rindex("</svg>")]
        parts.append(f'<g class="mw-plot" data-metric="{html.escape(p.metric)}" '
                     f'transform="translate(0,{i * height})">{inner}</g>')
    parts.append("</svg>")
    return "".join(parts)


def svg_chart(series: Sequence[ChartSeries], title: str, metric: str, width: int = 720,
              height: int = 320, xlabel: str = "step", marks: Sequence[tuple[float, str]] = ()) -> str:
    """Line chart: one polyline per visible series (class ``mw-series``, ``data-name``), axes, legend,
    dashed vertical ``marks`` (x, label: the epochs). Non-finite values are left out, not drawn at 0."""
    shown = sorted((s for s in series if s.visible), key=lambda s: not s.faint)  # earlier runs underneath
    left, right, top, bottom = _MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM
    arrays = []
    for s in shown:
        xs, ys = np.asarray(s.x, dtype=float), np.asarray(s.y, dtype=float)
        finite = np.isfinite(ys)
        arrays.append((xs[finite], ys[finite]))
    all_x = np.concatenate([xs for xs, _ in arrays]) if arrays else np.empty(0)
    all_y = np.concatenate([ys for _, ys in arrays]) if arrays else np.empty(0)
    x0, x1 = (float(all_x.min()), float(all_x.max())) if all_x.size else (0.0, 1.0)
    y0, y1 = (float(all_y.min()), float(all_y.max())) if all_y.size else (0.0, 1.0)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + (y1 - y) / (y1 - y0) * plot_h

    def polyline_points(xs: np.ndarray, ys: np.ndarray) -> str:
        """"x,y x,y ..." in tenths of a pixel, formatted in bulk (a live chart is redrawn 5 times a
        second: per-point float formatting cost ~10 ms per picture)."""
        tenths = np.rint(np.stack([left + (xs - x0) / (x1 - x0) * plot_w,
                                   top + (y1 - ys) / (y1 - y0) * plot_h], axis=1) * 10).astype(np.int64)
        return " ".join(f"{a // 10}.{a % 10},{b // 10}.{b % 10}" for a, b in tenths.tolist())

    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="18" font-size="14">{esc(title)}</text>',
             f'<path d="M{left},{top} V{top + plot_h} H{left + plot_w}" stroke="#444" fill="none"/>']
    for i in range(5):
        xv, yv = x0 + (x1 - x0) * i / 4, y0 + (y1 - y0) * i / 4
        parts.append(f'<text x="{px(xv):.1f}" y="{top + plot_h + 14}" text-anchor="middle">{xv:.4g}</text>')
        parts.append(f'<text x="{left - 4}" y="{py(yv) + 4:.1f}" text-anchor="end">{yv:.3g}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{top + plot_h + 30}" text-anchor="middle">{esc(xlabel)}</text>')
    parts.append(f'<text x="14" y="{top + plot_h / 2:.0f}" transform="rotate(-90 14 {top + plot_h / 2:.0f})" '
                 f'text-anchor="middle">{esc(metric)}</text>')
    for x, label in marks:
        if x0 < x <= x1:
            parts.append(f'<path class="mw-mark" d="M{px(x):.1f},{top} V{top + plot_h}" stroke="#999" '
                         f'stroke-dasharray="3 3"/><text x="{px(x) + 3:.1f}" y="{top + 10}" '
                         f'fill="#666">{esc(label)}</text>')
    legend_x = left
    for s, (xs, ys) in zip(shown, arrays):
        points = polyline_points(xs, ys)
        dash_attr = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        if s.faint:
            dash_attr += f' stroke-opacity="{FAINT_OPACITY}"'
        if points:
            kind = "mw-series mw-earlier" if s.faint else "mw-series"
            parts.append(f'<polyline class="{kind}" data-name="{esc(s.name)}" points="{points}" fill="none" '
                         f'stroke="{s.colour}" stroke-width="{1 if s.faint else 1.5}"{dash_attr}/>')
            if s.faint:  # the run's label where its line ends
                parts.append(f'<text class="mw-earlier-label" x="{px(float(xs[-1])) - 2:.1f}" '
                             f'y="{py(float(ys[-1])) - 4:.1f}" text-anchor="end" fill="{s.colour}">'
                             f'{esc(s.name.split(" (")[0])}</text>')
        y_legend = height - 12
        parts.append(f'<line x1="{legend_x}" y1="{y_legend - 4}" x2="{legend_x + 18}" y2="{y_legend - 4}" '
                     f'stroke="{s.colour}" stroke-width="2"{dash_attr}/>')
        parts.append(f'<text x="{legend_x + 22}" y="{y_legend}">{esc(s.name)}</text>')
        legend_x += 30 + 6 * len(s.name)
    parts.append("</svg>")
    return "".join(parts)
