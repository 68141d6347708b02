"""The dashboard only when there is something to draw.

:class:`ChartOnFirstMetric` is an event sink that builds and shows the live chart (and its status
table) at the first metric record of a cell, whatever the cell's code: a cell that reports nothing
draws nothing and pays nothing, and a training cell's chart comes where its metrics come, after the
output written before them. Worker state changes before that are kept, so the status table starts
right. The chart it shows is the widget of ``mwnotebook/frontend/chart/widget.py`` (a plot per metric,
each update carrying only the new points), or the SVG picture updated in place where no widget can be
drawn; ``mwnotebook/frontend/chart/live.py`` says why not plotly's own widget.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mwnotebook.shared.events import Event, WorkerMetrics, WorkerStateChanged

log = logging.getLogger(__name__)
#: Earlier runs of a cell its chart draws when the magic is not told otherwise (``%%mwtrain --compare N``).
DEFAULT_COMPARE = 3
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


def _new_dashboard(num_workers: int, lines: Any = None, **options: Any) -> Any:
    from mwnotebook.frontend.chart.live import Dashboard

    return Dashboard(num_workers, lines=lines, **options)


class ChartOnFirstMetric:
    """An event sink: no chart until a worker reports a metric; then the full dashboard."""

    def __init__(self, num_workers: int, factory: Callable[..., Any] = _new_dashboard, lines: Any = None,
                 earlier_runs: Sequence[tuple[int, Mapping[str, Any] | None]] = (),
                 earlier_in_picture: bool = False) -> None:
        """``earlier_runs``: ``(run number, chart snapshot)`` of earlier runs of the cell, latest
        first (the run history's records: mwnotebook/experiments/history.py), drawn faintly under the
        live curves; ``earlier_in_picture``: also in the picture kept when the run ends."""
        self.num_workers = num_workers
        self.lines = lines  # a --ps cluster's worker-server lines (frontend/chart/lines.py), else None
        self._options: dict[str, Any] = {}
        if earlier_runs:  # (the chart's modules are loaded only once there is something to draw)
            from mwnotebook.frontend.chart.earlier import earlier_runs as drawable

            runs = drawable(earlier_runs)
            if runs:
                self._options = {"earlier_runs": runs, "earlier_in_picture": earlier_in_picture}
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
            self.dashboard = (self._factory(self.num_workers, **self._options) if self.lines is None
                              else self._factory(self.num_workers, self.lines, **self._options))
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

    def snapshot(self) -> dict[str, Any] | None:
        """The run's chart as later runs of the cell draw it (plain JSON; ``None``: no chart was
        drawn): what the run history keeps for them."""
        if self.dashboard is None:
            return None
        snap: dict[str, Any] | None = self.dashboard.snapshot()
        return snap
