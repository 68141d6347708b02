"""The live dashboard of one cluster run: a status table and a per-worker chart, fed by events.

Both are plain displays updated in place (``update_display_data``), not widgets: the chart is an SVG
picture of a few kilobytes while training runs, and becomes plotly's interactive chart when the run
ends (:meth:`Dashboard.finish`, the same display). Measured in JupyterLab + headless Chromium
(``benchmarks/chart_in_browser.py``, table in benchmarks/README.md): plotly's ``FigureWidget`` sends
all of plotly.js (5 MB) in its ``comm_open`` for every chart, the browser runs it on its main thread
(seconds on a loaded machine) and JupyterLab handles a kernel's messages in order, so every worker's
progress line stood still behind it; then each widget update cost 50-160 ms of redrawing, 5 times
a second. The SVG display is drawn ~40 ms after it is sent and leaves the progress lines alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from mwnotebook.frontend.chart.plotly_figure import as_plotly_figure, figure_dict
from mwnotebook.frontend.chart.series import ChartSeries, chart_series, worker_series_name
from mwnotebook.frontend.chart.static_copy import static_bundle
from mwnotebook.frontend.chart.status import StatusBoard, WorkerStatus
from mwnotebook.frontend.chart.svg import svg_chart
from mwnotebook.frontend.chart.throttle import Throttle
from mwnotebook.shared.events import Event, WorkerMetrics, WorkerStateChanged
from mwnotebook.shared.metrics import MetricsStore

log = logging.getLogger(__name__)

#: Points per line of the live picture (the picture is 720 pixels wide; more would not show).
LIVE_POINTS = 600

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
        self._lock = threading.RLock()
        self._store = MetricsStore()
        self._board = StatusBoard(num_workers, metric)
        self._throttle = Throttle(self._push, max_updates_per_s, self._lock, clock)
        self._finished = False
        self._chart_handle: Any = None
        self._status_handle: Any = None
        self._title = title or f"{metric} per worker"
        self._shown: list[ChartSeries] = self._series()  # what the chart shows now
        self.events_seen = 0
        global _LAST
        _LAST = self

    # -- the event sink --------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        """Take one event (any thread). Cheap: the frontend is updated at most at the set rate."""
        with self._lock:
            self.events_seen += 1
            if isinstance(event, WorkerMetrics):
                self._store.add(event.worker, event.records)
                self._board.on_metrics(event)
            elif isinstance(event, WorkerStateChanged):
                if not self._board.on_state(event):
                    return
            else:
                return
            if not self._finished:  # after finish, late events only add to the data
                self._throttle.changed()

    def flush(self) -> None:
        """Send pending changes to the frontend now (ignores the rate limit)."""
        with self._lock:
            self._throttle.flush()

    # -- what is shown -----------------------------------------------------------------------
    def _series(self, max_points: int | None = None) -> list[ChartSeries]:
        names = []
        for w in range(self.num_workers):
            status = self._board.status_for(w)
            names.append(worker_series_name(w, self.metric, status.error if status.state == "failed" else None))
        return chart_series(self._store, self.metric, self.num_workers,
                            max_points=max_points or self.max_points, names=names)

    def _push(self) -> None:
        """One frontend update: the chart (its static copy once finished) and the status table."""
        try:
            if self._finished:
                self._shown = self._series()
                chart = self.static_bundle(self._shown)
            else:
                self._shown = self._series(min(LIVE_POINTS, self.max_points))
                chart = self.live_chart_bundle(self._shown)
            if self._chart_handle is not None:
                self._chart_handle.update(chart, raw=True)
            if self._status_handle is not None:
                self._status_handle.update(self.status_bundle(), raw=True)
        except Exception:  # a broken display must never break the training run
            log.exception("mwnotebook dashboard update failed")

    def live_chart_bundle(self, series: list[ChartSeries] | None = None) -> dict[str, Any]:
        """The chart while the run goes on: an SVG picture in HTML, which the browser swaps in a few
        milliseconds (plotly's chart would be drawn anew each time)."""
        if series is None:
            series = self._series(min(LIVE_POINTS, self.max_points))
        svg = svg_chart(series, self._title, self.metric)
        return {"text/html": f"<div class='mw-live-chart'>{svg}</div>",
                "text/plain": f"{self._title} (live)"}

    def status_bundle(self) -> dict[str, Any]:
        return {"text/html": self.status_html(), "text/plain": self.status_text()}

    @property
    def figure(self) -> Any:
        """A plotly ``go.Figure`` of the chart as last sent to the frontend (downsampled traces: at
        most :data:`LIVE_POINTS` per line while the run goes on, ``max_points`` once finished)."""
        with self._lock:
            return as_plotly_figure(figure_dict(self._shown, self._title, self.metric))

    def static_figure(self) -> Any:
        """A plain ``go.Figure`` copy of the chart as it is now (downsampled traces)."""
        with self._lock:
            return as_plotly_figure(figure_dict(self._series(), self._title, self.metric))

    # -- status table ------------------------------------------------------------------------
    def status_rows(self) -> list[dict[str, Any]]:
        """The status table as data: one dict per worker."""
        with self._lock:
            return self._board.rows()

    def status_html(self) -> str:
        with self._lock:
            return self._board.html()

    def status_text(self) -> str:
        with self._lock:
            return self._board.text()

    @property
    def worker_status(self) -> dict[int, WorkerStatus]:
        return self._board.workers

    # -- display and the end of the run --------------------------------------------------------
    def display(self) -> None:
        """Show the status table and the chart in the current cell (each with a display id)."""
        from IPython.display import display

        with self._lock:
            self._status_handle = display(self.status_bundle(), raw=True, display_id=True)
            self._chart_handle = display(self.live_chart_bundle(), raw=True, display_id=True)

    def finish(self, result: Any = None) -> None:
        """The run ended (however): one last update, in which the static copy (the interactive chart
        in JupyterLab) replaces the live picture under the same display id. ``result`` is accepted
        for symmetry with ``Cluster.run``."""
        with self._lock:
            self._finished = True
            self._throttle.flush(force=True)

    def static_bundle(self, series: list[ChartSeries] | None = None) -> dict[str, Any]:
        """MIME bundle of the final chart (see :mod:`mwnotebook.frontend.chart.static_copy`)."""
        with self._lock:
            if series is None:
                series = self._series()
            box = f"mw-chart-{id(self):x}-{len(self.update_times)}"
            return static_bundle(figure_dict(series, self._title, self.metric),
                                 svg_chart(series, self._title, self.metric), self.status_text(), box)

    def svg(self, width: int = 720, height: int = 320) -> str:
        """The chart as a small self-contained SVG picture (no plotly.js needed to view it)."""
        with self._lock:
            return svg_chart(self._series(), self._title, self.metric, width, height)

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
