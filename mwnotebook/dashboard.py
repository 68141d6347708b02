"""The live cluster dashboard: one plotly ``FigureWidget`` and a status table, fed by events.

Usage (what ``%%mwtrain`` does)::

    dash = Dashboard(num_workers=2)          # metric="loss" by default
    dash.display()                           # show it now, in the running cell
    result = cluster.run(code, on_event=dash)  # Dashboard is an EventSink
    dash.finish()                            # last update + static copy of the chart
    dash.records / dash.dataframe()          # the collected metrics as plain data
    last_dashboard().dataframe()             # the same, from a later cell

The chart has one trace per worker (its own, local ``loss``) and, when workers report
``global_loss``, a "global" trace (the value over all workers). Rows of the status table show
each worker's state, step, last loss and steps per second; a failed worker's row turns red with
its error name.

Why the throttle: workers may report thousands of points per second; each widget update is a
message to the browser. Events only update Python-side state; the frontend gets at most
``max_updates_per_s`` batched updates (``batch_update``), the last one when the run ends.
Long series are downsampled for display (:func:`mwnotebook.shared.metrics.downsample`); every point is
kept in :attr:`records`.

After the run, :meth:`finish` replaces the live widgets (same display ids) by static copies:
the chart as ``application/vnd.plotly.v1+json`` + ``text/html`` (an SVG picture that becomes the
interactive chart where plotly.js loads) + ``image/svg+xml``, and the status as an HTML table. A
saved notebook then renders without a kernel (JupyterLab, nbconvert, GitHub), and a live one
shows no duplicate chart.
"""

from __future__ import annotations

import html
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mwnotebook.shared.events import Event, WorkerMetrics, WorkerStateChanged
from mwnotebook.shared.metrics import MetricsStore, as_float, downsample, global_key, is_step_record

log = logging.getLogger(__name__)

_STATE_COLOURS = {
    "starting": "#6c757d",
    "idle": "#6c757d",
    "running": "#0d6efd",
    "done": "#198754",
    "failed": "#dc3545",
    "stopped": "#6c757d",
}
_FAILED_BG = "#f8d7da"


@dataclass
class WorkerStatus:
    """What the status table shows for one worker."""

    worker: int
    state: str = "starting"
    error: str = ""
    step: float | None = None
    last_value: float | None = None
    last_scope: str = ""  # "local" | "global"
    recent: deque = field(default_factory=lambda: deque(maxlen=64))  # (worker time, step)

    def steps_per_s(self) -> float | None:
        """Steps per second over the recent records, from the workers' own timestamps."""
        if len(self.recent) < 2:
            return None
        (t0, s0), (t1, s1) = self.recent[0], self.recent[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None


def _set_trace(trace: Any, x: Any, y: Any, name: str, visible: bool | None = None) -> None:
    """Assign only what changed (unchanged properties would still travel to the browser)."""
    if trace.name != name:
        trace.name = name
    if visible is not None and trace.visible != visible:
        trace.visible = visible
    old_x, old_y = trace.x, trace.y
    if (old_x is None or len(x) != len(old_x)
            or (len(x) and (old_x[-1] != x[-1] or old_y[-1] != y[-1]))):
        trace.x, trace.y = x, y


def _svg_chart(series: list, title: str, metric: str, width: int, height: int) -> str:
    """Line chart as SVG: one polyline per (name, colour, dash, x, y) series, axes, legend."""
    left, right, top, bottom = 60, 15, 30, 60
    finite = [(x, y) for *_rest, xs, ys in series for x, y in zip(xs, ys) if math.isfinite(y)]
    x0 = min((x for x, _ in finite), default=0.0)
    x1 = max((x for x, _ in finite), default=1.0)
    y0 = min((y for _, y in finite), default=0.0)
    y1 = max((y for _, y in finite), default=1.0)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + (y1 - y) / (y1 - y0) * plot_h

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
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{top + plot_h + 30}" text-anchor="middle">step</text>')
    parts.append(f'<text x="14" y="{top + plot_h / 2:.0f}" transform="rotate(-90 14 {top + plot_h / 2:.0f})" '
                 f'text-anchor="middle">{esc(metric)}</text>')
    legend_x = left
    for name, colour, dash, xs, ys in series:
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys) if math.isfinite(y))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        if points:
            parts.append(f'<polyline class="mw-series" data-name="{esc(name)}" points="{points}" fill="none" '
                         f'stroke="{colour}" stroke-width="1.5"{dash_attr}/>')
        y_legend = height - 12
        parts.append(f'<line x1="{legend_x}" y1="{y_legend - 4}" x2="{legend_x + 18}" y2="{y_legend - 4}" '
                     f'stroke="{colour}" stroke-width="2"{dash_attr}/>')
        parts.append(f'<text x="{legend_x + 22}" y="{y_legend}">{esc(name)}</text>')
        legend_x += 30 + 6 * len(name)
    parts.append("</svg>")
    return "".join(parts)


def _trace_colour(worker: int) -> str:
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
    return palette[worker % len(palette)]


def per_worker_figure(store: MetricsStore, metric: str, num_workers: int, *, title: str | None = None,
                      max_points: int | None = None, widget: bool = False) -> Any:
    """The chart of ``metric``: one coloured trace per worker (its local values) and the global
    curve dotted in black, hidden while no worker has reported it.

    The one implementation of the per-worker figure: the live dashboard starts from it
    (``widget=True``: a FigureWidget with empty traces) and the ``mwnotebook run`` report draws it.
    """
    import plotly.graph_objects as go

    def points(x: Any, y: Any) -> tuple[list[float], list[float]]:
        if max_points is not None:
            x, y = downsample(x, y, max_points)
        return list(map(float, x)), list(map(float, y))

    traces = []
    for w in range(num_workers):
        x, y = points(*store.local_series(w, metric))
        traces.append(go.Scatter(x=x, y=y, mode="lines", name=f"worker {w} (local {metric})",
                                 line={"color": _trace_colour(w), "width": 1.5}))
    gx, gy = points(*store.global_series(metric))
    traces.append(go.Scatter(x=gx, y=gy, mode="lines", name=f"global {metric} (all workers)",
                             line={"color": "black", "width": 2.5, "dash": "dot"}, visible=bool(gx)))
    layout = go.Layout(
        title={"text": title or f"{metric} per worker"},
        xaxis={"title": {"text": "step"}},
        yaxis={"title": {"text": metric}},
        height=360,
        margin={"l": 60, "r": 20, "t": 50, "b": 45},
        legend={"orientation": "h", "y": -0.2},
        template="plotly_white",
    )
    return go.FigureWidget(data=traces, layout=layout) if widget else go.Figure(data=traces, layout=layout)


_LAST: Dashboard | None = None


def last_dashboard() -> Dashboard:
    """The most recently created dashboard (e.g. the last ``%%mwtrain`` cell's), for its data::

        from mwnotebook.dashboard import last_dashboard
        df = last_dashboard().dataframe()
    """
    if _LAST is None:
        raise LookupError("no dashboard yet: run a %%mwtrain cell first")
    return _LAST


class Dashboard:
    """Live per-worker curves and status for one cluster run (an :data:`EventSink`)."""

    def __init__(self, num_workers: int, *, metric: str = "loss", max_points: int = 2000,
                 max_updates_per_s: float = 5.0, title: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if num_workers < 1:
            raise ValueError("num_workers must be at least 1")
        self.num_workers = num_workers
        self.metric = metric
        self.max_points = max_points
        self._interval = 1.0 / max_updates_per_s
        self._clock = clock
        self._lock = threading.RLock()
        self._store = MetricsStore()
        self._status = {w: WorkerStatus(w) for w in range(num_workers)}
        self._dirty = False
        self._timer: threading.Timer | None = None
        self._last_update = -math.inf
        self._finished = False
        self._chart_handle: Any = None
        self._status_handle: Any = None
        self._title = title or f"{metric} per worker"
        #: Frontend updates sent (batched chart + table updates) and when, for rate measurements.
        self.update_times: list[float] = []
        self.events_seen = 0
        self.figure = self._make_figure()
        self.status_widget = self._make_status_widget()
        global _LAST
        _LAST = self

    # -- construction ----------------------------------------------------------------------
    def _make_figure(self) -> Any:
        """All traces exist from the start (built in the constructor, so no message is sent
        before the widget is shown); the global trace stays hidden until a worker reports it."""
        return per_worker_figure(MetricsStore(), self.metric, self.num_workers, title=self._title, widget=True)

    def _make_status_widget(self) -> Any:
        import ipywidgets

        return ipywidgets.HTML(value=self.status_html())

    # -- the event sink --------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        """Take one event (any thread). Cheap: the frontend is updated by :meth:`_maybe_update`."""
        with self._lock:
            self.events_seen += 1
            if isinstance(event, WorkerMetrics):
                self._on_metrics(event)
            elif isinstance(event, WorkerStateChanged):
                status = self._status_for(event.worker)
                if status.state in ("done", "failed") and event.state != "running":
                    return  # keep how the run ended (a restart after a failure says starting/idle)
                status.state = event.state
                status.error = event.error if event.state == "failed" else ""
            else:
                return
            self._dirty = True
            self._maybe_update()

    def _status_for(self, worker: int) -> WorkerStatus:
        status = self._status.get(worker)
        if status is None:  # more workers than announced: show them too
            status = self._status[worker] = WorkerStatus(worker)
        return status

    def _on_metrics(self, event: WorkerMetrics) -> None:
        self._store.add(event.worker, event.records)
        status = self._status_for(event.worker)
        if status.state in ("starting", "idle"):
            status.state = "running"
        gkey = global_key(self.metric)
        for record in event.records:
            if not is_step_record(record):
                continue
            step = as_float(record.get("step"))
            if step is None:
                continue
            status.step = step
            stamp = as_float(record.get("time"))
            if stamp is not None:
                status.recent.append((stamp, step))
            if self.metric in record:
                status.last_value, status.last_scope = as_float(record[self.metric]), "local"
            elif gkey in record:
                status.last_value, status.last_scope = as_float(record[gkey]), "global"

    # -- throttled frontend updates ------------------------------------------------------------
    def _maybe_update(self) -> None:
        if self._finished:
            return  # the static copy is shown now; late events only add to the data
        wait = self._interval - (self._clock() - self._last_update)
        if wait <= 0:
            self._cancel_timer()
            self._push()
        elif self._timer is None:
            timer = threading.Timer(wait, self._on_timer)
            timer.args = (timer,)
            timer.daemon = True
            self._timer = timer
            timer.start()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self, timer: threading.Timer) -> None:
        with self._lock:
            if self._timer is not timer:
                return  # superseded: an update went out while this timer waited for the lock
            self._timer = None
            if self._dirty:
                self._maybe_update()

    def flush(self) -> None:
        """Send pending changes to the frontend now (ignores the rate limit)."""
        with self._lock:
            self._cancel_timer()
            if self._dirty:
                self._push()

    def _push(self) -> None:
        """One batched frontend update: all traces plus the status table."""
        self._dirty = False
        try:
            self._update_figure(self.figure)
            value = self.status_html()
            if self.status_widget.value != value:
                self.status_widget.value = value
        except Exception:  # a broken display must never break the training run
            log.exception("mwnotebook dashboard update failed")
        # Measured from the END of this update: however long an update takes (a starved kernel),
        # two updates leave at least one interval apart.
        self._last_update = self._clock()
        self.update_times.append(self._last_update)

    def _update_figure(self, fig: Any) -> None:
        with fig.batch_update():
            for w in range(self.num_workers):
                x, y = downsample(*self._store.local_series(w, self.metric), self.max_points)
                status = self._status[w]
                name = f"worker {w} (local {self.metric})"
                if status.state == "failed":
                    name += f" - failed: {status.error or 'error'}"
                _set_trace(fig.data[w], x, y, name)
            gx, gy = self._store.global_series(self.metric)
            if len(gx):
                x, y = downsample(gx, gy, self.max_points)
                _set_trace(fig.data[self.num_workers], x, y, fig.data[self.num_workers].name, visible=True)

    # -- status table ------------------------------------------------------------------------
    def status_rows(self) -> list[dict[str, Any]]:
        """The status table as data: one dict per worker."""
        rows = []
        for w in sorted(self._status):
            s = self._status[w]
            rows.append({"worker": w, "state": s.state, "error": s.error, "step": s.step,
                         "last": s.last_value, "scope": s.last_scope, "steps_per_s": s.steps_per_s()})
        return rows

    def status_html(self) -> str:
        head = "".join(f"<th style='padding:2px 10px;text-align:left'>{h}</th>" for h in
                       ("worker", "state", "step", f"last {self.metric}", "steps/s"))
        body = []
        for row in self.status_rows():
            failed = row["state"] == "failed"
            colour = _STATE_COLOURS.get(row["state"], "#000")
            state = html.escape(row["state"] + (f": {row['error']}" if failed and row["error"] else ""))
            last = "" if row["last"] is None else f"{row['last']:.4g}"
            if last and row["scope"] == "global":
                last += " (global)"
            cells = [str(row["worker"]), f"<b style='color:{colour}'>{state}</b>",
                     "" if row["step"] is None else f"{row['step']:g}", last,
                     "" if row["steps_per_s"] is None else f"{row['steps_per_s']:.1f}"]
            style = f" style='background:{_FAILED_BG}'" if failed else ""
            body.append(f"<tr class='mw-worker mw-{row['state']}'{style}>" + "".join(
                f"<td style='padding:2px 10px'>{c}</td>" for c in cells) + "</tr>")
        return ("<table class='mw-status' style='border-collapse:collapse;font-family:monospace'>"
                f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")

    # -- display and the end of the run --------------------------------------------------------
    def display(self) -> None:
        """Show the status table and the chart in the current cell (each with a display id)."""
        from IPython.display import display

        self._status_handle = display(self.status_widget, display_id=True)
        self._chart_handle = display(self.figure, display_id=True)

    def finish(self, result: Any = None) -> None:
        """The run ended (however): final update, then the static copies replace the widgets.

        ``result`` is accepted for symmetry with ``Cluster.run`` and not needed.
        """
        with self._lock:
            self._finished = True
            self._dirty = True
            self.flush()
            if self._chart_handle is not None:
                self._chart_handle.update(self.static_bundle(), raw=True)
            if self._status_handle is not None:
                self._status_handle.update({"text/html": self.status_html(),
                                            "text/plain": self.status_text()}, raw=True)
            if self._chart_handle is not None or self._status_handle is not None:
                self._close_widgets()

    def _close_widgets(self) -> None:
        """The static copies are shown now: close the live widgets, so that a saved notebook's widget
        state (nbclient saves it; JupyterLab can) does not carry the chart a second time (5 MB
        measured for a 3-epoch fit). Their data stays readable here (``figure.data``)."""
        for widget in (self.figure, self.status_widget):
            try:
                widget.close()
            except Exception:
                log.debug("closing a dashboard widget failed", exc_info=True)

    def static_figure(self) -> Any:
        """A plain ``go.Figure`` copy of the chart as it is now (downsampled traces)."""
        import plotly.graph_objects as go

        with self._lock:
            return go.Figure(self.figure)

    def static_bundle(self) -> dict[str, Any]:
        """MIME bundle of the final chart, for every way a saved notebook gets rendered.

        * ``application/vnd.plotly.v1+json``: JupyterLab / VS Code draw an interactive chart;
        * ``text/html``: an inline SVG picture, which a script replaces with the interactive
          chart when plotly.js can be loaded (nbconvert HTML online); GitHub (no scripts) and
          offline viewers keep the picture;
        * ``image/svg+xml`` and ``text/plain``: the picture and the status as text.
        """
        import json

        import plotly.io as pio
        from plotly.offline import get_plotlyjs_version

        fig_json = pio.to_json(self.static_figure(), validate=False)
        svg = self.svg()
        box = f"mw-chart-{id(self):x}-{len(self.update_times)}"
        script = (
            "(function(){{var box=document.getElementById('{}');var fig={};"
            "function draw(){{box.innerHTML='';window.Plotly.newPlot(box,fig.data,fig.layout,{{responsive:true}});}}"
            "if(window.Plotly){{draw();return;}}var s=document.createElement('script');"
            "s.src='https://cdn.plot.ly/plotly-{}.min.js';s.onload=draw;document.head.appendChild(s);}})();"
        ).format(box, fig_json.replace("</", "<\\/"), get_plotlyjs_version())
        return {
            "application/vnd.plotly.v1+json": json.loads(fig_json),
            "text/html": f'<div id="{box}" class="mw-static-chart">{svg}</div><script>{script}</script>',
            "image/svg+xml": svg,
            "text/plain": self.status_text(),
        }

    def svg(self, width: int = 720, height: int = 320) -> str:
        """The chart as a small self-contained SVG picture (no plotly.js needed to view it)."""
        series = []
        with self._lock:
            for w in range(self.num_workers):
                x, y = downsample(*self._store.local_series(w, self.metric), self.max_points)
                series.append((self.figure.data[w].name, _trace_colour(w), "", x, y))
            gx, gy = downsample(*self._store.global_series(self.metric), self.max_points)
            if len(gx):
                series.append((f"global {self.metric} (all workers)", "#000000", "4 3", gx, gy))
        return _svg_chart(series, self._title, self.metric, width, height)

    def status_text(self) -> str:
        parts = []
        for row in self.status_rows():
            text = f"worker {row['worker']}: {row['state']}"
            if row["error"]:
                text += f" ({row['error']})"
            if row["step"] is not None:
                text += f", step {row['step']:g}"
            if row["last"] is not None:
                text += f", {self.metric} {row['last']:.4g}"
            parts.append(text)
        return "\n".join(parts)

    # -- data ----------------------------------------------------------------------------------
    @property
    def records(self) -> list[dict[str, Any]]:
        """Every record received, in arrival order, each with its ``worker``."""
        with self._lock:
            return self._store.records

    def dataframe(self) -> Any:
        """The records as a pandas DataFrame (needs pandas)."""
        with self._lock:
            return self._store.to_dataframe()

    @property
    def store(self) -> MetricsStore:
        return self._store

    def update_rate(self) -> float:
        """Frontend updates per second between the first and the last one."""
        times = self.update_times
        if len(times) < 2 or times[-1] <= times[0]:
            return 0.0
        return (len(times) - 1) / (times[-1] - times[0])

    def max_update_rate(self, window: float = 1.0) -> int:
        """The most frontend updates seen in any ``window`` seconds (for rate-limit checks)."""
        best, start = 0, 0
        times = self.update_times
        for end in range(len(times)):
            while times[end] - times[start] > window:
                start += 1
            best = max(best, end - start + 1)
        return best
