"""The live dashboard of one cluster run: a status table and a live chart of every metric, fed by events.

In a notebook the chart is a widget (:mod:`mwnotebook.frontend.chart.widget`: anywidget + uPlot,
one per cell, made at the first metric): interaction lives in the page, and each update carries
only the new points, a few per line (:mod:`mwnotebook.frontend.chart.feed`), at most
``max_updates_per_s`` times a second. When the run ends (:meth:`Dashboard.finish`) the same display
becomes the static copy (plotly JSON + SVG picture, every metric) and the widget is closed, so a
saved notebook holds no widget state. Where no widget can be drawn (terminal IPython, the
JavaScript not built) the chart is the SVG picture, updated in place. Why not plotly's
``FigureWidget``: its ``comm_open`` carried all of plotly.js (5 MB) for every chart and held up the
page's other output for seconds (``benchmarks/chart.py browser``, benchmarks/README.md).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from mwnotebook.frontend.chart.earlier import EarlierRun, overlay_state, snapshot, with_earlier
from mwnotebook.frontend.chart.feed import LiveFeed
from mwnotebook.frontend.chart.lines import ChartLines
from mwnotebook.frontend.chart.plotly_figure import as_plotly_figure, plots_figure_dict
from mwnotebook.frontend.chart.plots import ChartPlot, chart_plots
from mwnotebook.frontend.chart.series import GLOBAL_COLOUR, trace_colour
from mwnotebook.frontend.chart.static_copy import static_bundle
from mwnotebook.frontend.chart.status import StatusBoard, WorkerStatus
from mwnotebook.frontend.chart.svg import svg_plots
from mwnotebook.frontend.chart.throttle import Throttle
from mwnotebook.frontend.chart.widget import in_widget_kernel, new_widget, widget_bundle, widget_unavailable
from mwnotebook.shared.events import Event, RunRestarted, WorkerMetrics, WorkerResources, WorkerStateChanged
from mwnotebook.shared.metrics import MetricsStore

log = logging.getLogger(__name__)

#: Points per line of the live picture (the picture is 720 pixels wide; more would not show).
LIVE_POINTS = 600
#: About the most bytes the end state's bundle may take (it is also what the saved notebook keeps).
STATIC_BYTES = 150_000
#: Seconds after the widget is made during which an update every KEY_FRAME_EVERY seconds is a key
#: frame (see feed.py): the page's view is complete if the widget's module loaded within this time.
KEY_FRAME_SECONDS = 2.5
KEY_FRAME_EVERY = 0.5
_warned: set[str] = set()

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
                 clock: Callable[[], float] = time.monotonic, use_widget: bool | None = None,
                 lines: ChartLines | None = None, earlier_runs: Sequence[EarlierRun] = (),
                 earlier_in_picture: bool = False) -> None:
        """``earlier_runs``: earlier runs of the cell, latest first, drawn faintly under the live
        curves (frontend/chart/earlier.py); ``earlier_in_picture``: also in the picture kept when
        the run ends (by default that picture shows this run only)."""
        if num_workers < 1:
            raise ValueError("num_workers must be at least 1")
        self.num_workers = num_workers
        #: The chart's lines: one per cell kernel, then a --ps cluster's worker servers (lines.py).
        self.lines = lines if lines is not None else ChartLines(num_workers)
        self.metric = metric
        self.max_points = max_points
        self.earlier_runs = list(earlier_runs)
        self.earlier_in_picture = earlier_in_picture
        self._lock = threading.RLock()
        self._store = MetricsStore()
        self._board = StatusBoard(num_workers, metric, self.lines.kernel_names)
        self._throttle = Throttle(self._push, max_updates_per_s, self._lock, clock)
        self._clock = clock
        self._finished = False
        self._chart_handle: Any = None
        self._status_handle: Any = None
        self._title = title or f"{metric} per worker"
        self._feed = LiveFeed(self.lines.count)
        self._feed.line_names = {w: self.lines.short_name(w) for w in range(self.lines.kernels, self.lines.count)}
        self._use_widget = use_widget
        self._widget: Any = None
        self._widget_made = 0.0
        self._last_key = -math.inf
        #: Bytes of each widget update (JSON content + buffer), for budget checks.
        self.message_bytes: list[int] = []
        self._shown: list[ChartPlot] | None = self._plots()  # what the picture shows now
        self.events_seen = 0
        global _LAST
        _LAST = self

    # -- the event sink --------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        """Take one event (any thread). Cheap: the frontend is updated at most at the set rate."""
        with self._lock:
            self.events_seen += 1
            if isinstance(event, WorkerMetrics):
                for line, records in self.lines.split(event.worker, event.records):
                    rows, columns = self._store.add_batch(event.worker, records, line=line)
                    self._feed.add_columns(line, rows, columns)
                self._board.on_metrics(event)
            elif isinstance(event, WorkerStateChanged):
                if not self._board.on_state(event):
                    return
            elif isinstance(event, WorkerResources):  # CPU and memory in the status table (status.py)
                self._board.on_resources(event)
            elif isinstance(event, RunRestarted):  # one run along the x-axis, the restart marked
                self._store.add_restart(event.cause, time=event.lost_at, restart_seconds=event.restart_seconds)
                self._feed.restart()
            else:
                return
            if not self._finished:  # after finish, late events only add to the data
                self._throttle.changed()

    def flush(self) -> None:
        """Send pending changes to the frontend now (ignores the rate limit)."""
        with self._lock:
            self._throttle.flush()

    # -- what is shown -----------------------------------------------------------------------
    def _names(self) -> list[str]:
        """Legend names per worker, ``{metric}`` left to fill in (a failed worker says so)."""
        names = []
        for w in range(self.lines.count):
            error = None
            if w < self.num_workers and self._board.status_for(w).state == "failed":
                error = self._board.status_for(w).error.replace("{", "{{").replace("}", "}}")
            names.append(self.lines.series_name(w, "{metric}", error))
        return names

    def _plots(self, max_points: int | None = None, earlier: bool = False,
                lines: int | None = None) -> list[ChartPlot]:
        """The run's plots; ``earlier``: with a faint line per earlier run of the cell; ``lines``:
        only the first lines (and the global one)."""
        notes = {key: plot.note for key, plot in self._feed.plots.items()}
        plots = chart_plots(self._store, lines or self.lines.count, self.metric,
                              max_points=max_points or self.max_points, names=self._names(), notes=notes)
        return with_earlier(plots, self.earlier_runs, max_points) if earlier else plots

    def _static_points(self) -> int:
        """Points per line of the end state, so that it stays under ~150 kB however many workers and
        metrics (each point is in it four times: plotly JSON twice, the SVG twice; ~56 bytes)."""
        lines = max(1, sum(1 for key in self._feed.lines))
        return max(100, min(self.max_points, STATIC_BYTES // (56 * lines)))

    def _epochs(self) -> list[tuple[float, int]]:
        return sorted((step, epoch) for epoch, step in self._feed.epochs.items())

    def _push(self) -> None:
        """One frontend update: the chart (its static copy once finished) and the status table."""
        try:
            if self._finished:
                self._shown = self._plots(self._static_points(), earlier=self.earlier_in_picture)
                chart: dict[str, Any] | None = self.static_bundle(self._shown)
            elif self._widget is not None:
                chart = None
                self._send_points()
            else:
                self._shown = self._plots(min(LIVE_POINTS, self.max_points), earlier=True)
                chart = self.live_chart_bundle(self._shown)
            if self._chart_handle is not None and chart is not None:
                self._chart_handle.update(chart, raw=True)
            if self._status_handle is not None:
                self._status_handle.update(self.status_bundle(), raw=True)
            if self._finished and self._widget is not None:
                self._widget.close()  # after the static copy took its place: nothing of it is saved
                self._widget = None
        except Exception:  # a broken display must never break the training run
            log.exception("mwnotebook dashboard update failed")

    def _send_points(self) -> None:
        names = [self.lines.short_name(w) for w in range(self.lines.count)] + ["global"]
        for w in range(self.num_workers):
            status = self._board.status_for(w)
            if status.state == "failed":
                names[w] += f" (failed: {status.error or 'error'})"
        self._feed.set_names(names)
        now = self._clock()
        key = now - self._widget_made < KEY_FRAME_SECONDS and now - self._last_key >= KEY_FRAME_EVERY
        if key:
            self._last_key = now
        message = self._feed.message(key=key)
        if message is not None:
            content, buffers = message
            self._widget.send(content, buffers)
            self.message_bytes.append(len(json.dumps(content)) + sum(len(b) for b in buffers))

    def live_chart_bundle(self, plots: list[ChartPlot] | None = None) -> dict[str, Any]:
        """The picture while the run goes on where no widget can be drawn: an SVG picture in HTML."""
        if plots is None:
            plots = self._plots(min(LIVE_POINTS, self.max_points), earlier=True)
        svg = svg_plots(plots, self._title, epochs=self._epochs())
        return {"text/html": f"<div class='mw-live-chart'>{svg}</div>",
                "text/plain": f"{self._title} (live)"}

    def status_bundle(self) -> dict[str, Any]:
        """The status table as a display bundle (HTML, and plain text for terminals and nbconvert)."""
        return {"text/html": self.status_html(), "text/plain": self.status_text()}

    @property
    def figure(self) -> Any:
        """A plotly ``go.Figure`` of every plot as last drawn as a picture (downsampled traces: at
        most :data:`LIVE_POINTS` per line while the run goes on, ``max_points`` once finished); with
        the live widget, as the data are now."""
        with self._lock:
            plots = self._shown if self._widget is None and self._shown is not None else self._plots()
            return as_plotly_figure(plots_figure_dict(plots, self._title, self._epochs()))

    def static_figure(self) -> Any:
        """A plain ``go.Figure`` copy of the chart as it is now (downsampled traces)."""
        with self._lock:
            return as_plotly_figure(plots_figure_dict(self._plots(), self._title, self._epochs()))

    # -- status table ------------------------------------------------------------------------
    def status_rows(self) -> list[dict[str, Any]]:
        """The status table as data: one dict per worker."""
        with self._lock:
            return self._board.rows()

    def status_html(self) -> str:
        """The status table as HTML: a row per worker, a failed one red with its error's name."""
        with self._lock:
            return self._board.html()

    def status_text(self) -> str:
        """The status table as plain text."""
        with self._lock:
            return self._board.text()

    @property
    def worker_status(self) -> dict[int, WorkerStatus]:
        """Each worker's row of the status table, by worker index."""
        return self._board.workers

    # -- display and the end of the run --------------------------------------------------------
    def display(self) -> None:
        """Show the status table and the chart in the current cell (each with a display id)."""
        from IPython.display import display

        with self._lock:
            self._status_handle = display(self.status_bundle(), raw=True, display_id=True)
            if self._use_widget is not False and in_widget_kernel():
                reason = widget_unavailable()
                if reason is None:
                    colours = [trace_colour(w) for w in range(self.lines.count)] + [GLOBAL_COLOUR]
                    names = [self.lines.short_name(w) for w in range(self.lines.count)] + ["global"]
                    self._widget = new_widget(f"live curves, {self.num_workers} workers", names, colours,
                                              overlay_state(self.earlier_runs))
                    self._widget_made = self._clock()
                    self._chart_handle = display(widget_bundle(self._widget, f"{self._title} (live)"),
                                                 raw=True, display_id=True)
                    return
                if reason not in _warned:
                    _warned.add(reason)
                    log.warning("mwnotebook: no live chart widget, a picture instead: %s", reason)
            self._chart_handle = display(self.live_chart_bundle(), raw=True, display_id=True)

    def finish(self) -> None:
        """The run ended (however): one last update, in which the static copy (the interactive chart
        in JupyterLab) replaces the live picture under the same display id."""
        with self._lock:
            self._finished = True
            self._throttle.flush(force=True)

    def static_bundle(self, plots: list[ChartPlot] | None = None) -> dict[str, Any]:
        """MIME bundle of the final chart (see :mod:`mwnotebook.frontend.chart.static_copy`)."""
        with self._lock:
            if plots is None:
                plots = self._plots(self._static_points(), earlier=self.earlier_in_picture)
            box = f"mw-chart-{id(self):x}-{len(self.update_times)}"
            epochs = self._epochs()
            return static_bundle(plots_figure_dict(plots, self._title, epochs),
                                 svg_plots(plots, self._title, epochs=epochs), self.status_text(), box)

    def svg(self, width: int = 720, height: int = 320) -> str:
        """The chart as a small self-contained SVG picture (no plotly.js needed to view it)."""
        with self._lock:
            return svg_plots(self._plots(), self._title, width, height, self._epochs())

    # -- data ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any] | None:
        """This run as a later run of the cell draws it (plain JSON, a few kB per metric; ``None``:
        nothing was drawn): what the run history keeps (frontend/chart/earlier.py)."""
        with self._lock:
            # the global line, else the first with points: line 0 and the global one are enough
            # unless a plot has neither (a --ps coordinator reports no loss of its own)
            plots = self._plots(lines=1)
            if any(not any(s.x for s in p.series) for p in plots):
                plots = self._plots()
            return snapshot(plots)  # (reduced to SNAPSHOT_POINTS by averaging)

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
        """Every metric record of the run, as the chart keeps them (``records`` is the plain list)."""
        return self._store

    @property
    def update_times(self) -> list[float]:
        """When each frontend update (chart + table) was sent, for rate measurements."""
        return self._throttle.times

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
