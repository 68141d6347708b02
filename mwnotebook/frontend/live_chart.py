"""The dashboard only when there is something to draw.

:class:`ChartOnFirstMetric` is an event sink that builds and shows the live chart (and its status
table) at the first metric record of a cell, so a cell that reports nothing draws nothing and pays
nothing (building the plotly widget is what made a no-op cell cost ~145 ms). Worker state changes
before that are kept, so the status table starts right.

A cell whose code plainly reports metrics (``mw.report(``, ``keras_callback(``, ``.fit(``) gets its
chart when the cell starts instead (:func:`reports_metrics`): plotly 6's widget carries all of
plotly.js (5 MB) and JupyterLab handles a kernel's messages in order, so a widget first shown in the
middle of training held up every later output and the chart itself until the cell ended on a
loaded machine (measured in tests/browser: chart drawn only after the cell, 36 s). Shown at the
start, its loading overlaps the workers' TensorFlow start-up.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

from mwnotebook.shared.events import Event, WorkerMetrics, WorkerStateChanged

log = logging.getLogger(__name__)
_REPORTS = re.compile(r"\b(?:report|keras_callback)\s*\(|\.fit\s*\(")


def reports_metrics(code: str) -> bool:
    """Whether a cell's code plainly reports metrics (a guess from its text, for when to draw)."""
    return bool(_REPORTS.search(code))
_preload: threading.Thread | None = None


def preload_in_background() -> None:
    """Import the chart's libraries in a background thread, once.

    Importing plotly's widget (which pulls in nbformat and jsonschema) takes ~1 s on an idle machine
    and was measured at 14 s on a loaded one. Done lazily at the first metric, that would stall
    the cell's live output for as long; done here (when the extension loads) it costs the cells
    nothing.
    """
    global _preload
    if _preload is not None:
        return

    def load() -> None:
        try:
            import plotly.graph_objects
            import plotly.graph_objs._figurewidget  # noqa: F401

            import mwnotebook.dashboard  # noqa: F401
        except Exception:
            log.debug("the chart's libraries could not be imported", exc_info=True)

    _preload = threading.Thread(target=load, name="mwnotebook-chart-preload", daemon=True)
    _preload.start()


def _new_dashboard(num_workers: int) -> Any:
    from mwnotebook.dashboard import Dashboard

    return Dashboard(num_workers)


class ChartOnFirstMetric:
    """An event sink: no chart until a worker reports a metric; then the full dashboard."""

    def __init__(self, num_workers: int, factory: Callable[[int], Any] = _new_dashboard) -> None:
        self.num_workers = num_workers
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
            self.dashboard = self._factory(self.num_workers)
        except ImportError:  # plotly / ipywidgets missing: text output only
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

    def finish(self, result: Any = None) -> None:
        if self.dashboard is not None:
            self.dashboard.finish(result)
