"""The dashboard only when there is something to draw.

:class:`ChartOnFirstMetric` is an event sink that builds and shows the live chart (and its status
table) at the first metric record of a cell, whatever the cell's code: a cell that reports nothing
draws nothing and pays nothing, and a training cell's chart comes where its metrics come, after the
output written before them. Worker state changes before that are kept, so the status table starts
right. This is cheap mid-training because the live chart is a plain display of an SVG picture, not
plotly's widget (see :mod:`mwnotebook.frontend.chart.live` for what the widget cost the browser).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from mwnotebook.shared.events import Event, WorkerMetrics, WorkerStateChanged

log = logging.getLogger(__name__)
_preload: threading.Thread | None = None


def preload_in_background() -> None:
    """Import the chart's modules and what its static copy needs (plotly's version) in a background
    thread, once: imports at the first metric would hold up the cell's live output (plotly's import
    was measured at 14 s on a loaded machine); done when the extension loads, they cost cells nothing.
    """
    global _preload
    if _preload is not None:
        return

    def load() -> None:
        try:
            import plotly.offline  # noqa: F401

            import mwnotebook.frontend.chart.live  # noqa: F401
        except Exception:
            log.debug("the chart's libraries could not be imported", exc_info=True)

    _preload = threading.Thread(target=load, name="mwnotebook-chart-preload", daemon=True)
    _preload.start()


def _new_dashboard(num_workers: int, lines: Any = None) -> Any:
    from mwnotebook.frontend.chart.live import Dashboard

    return Dashboard(num_workers, lines=lines)


class ChartOnFirstMetric:
    """An event sink: no chart until a worker reports a metric; then the full dashboard."""

    def __init__(self, num_workers: int, factory: Callable[..., Any] = _new_dashboard, lines: Any = None) -> None:
        self.num_workers = num_workers
        self.lines = lines  # a --ps cluster's worker-server lines (frontend/chart/lines.py), else None
        self._factory = factory
        self._early_states: dict[int, WorkerStateChanged] = {}
        self.dashboard: Any = None

    def __call__(self, event: Event) -> None:
        if self.dashboard is None:
            if isinstance(event, WorkerStateChanged):
                self._early_states[event.worker] = event
                return
            if not isinstance(event, WorkerMetrics) or not self.show_now():
                return
        self.dashboard(event)

    def show_now(self) -> bool:
        """Build and show the chart now (if not yet); False when it cannot be drawn."""
        if self.dashboard is not None:
            return True
        try:
            self.dashboard = (self._factory(self.num_workers) if self.lines is None
                              else self._factory(self.num_workers, self.lines))
        except ImportError:  # a missing library: text output only
            self._factory = lambda n: None
            return False
        if self.dashboard is None:
            return False
        sys.stdout.flush()  # the output written so far comes before the chart
        sys.stderr.flush()
        self.dashboard.display()
        for early in self._early_states.values():
            self.dashboard(early)
        self._early_states.clear()
        return True

    def finish(self) -> None:
        if self.dashboard is not None:
            self.dashboard.finish()
