"""The dashboard only when there is something to draw.

:class:`ChartOnFirstMetric` is an event sink that builds and shows the live chart (and its status
table) at the first metric record of a cell, so a cell that reports nothing draws nothing and pays
nothing (building the plotly widget is what made a no-op cell cost ~145 ms). Worker state changes
before that are kept, so the status table starts right.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwnotebook.shared.events import Event, WorkerMetrics, WorkerStateChanged


def _new_dashboard(num_workers: int) -> Any:
    from mwnotebook.dashboard import Dashboard  # noqa: PLC0415 - plotly and ipywidgets only when needed

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
            if not isinstance(event, WorkerMetrics):
                return
            try:
                self.dashboard = self._factory(self.num_workers)
            except ImportError:  # plotly / ipywidgets missing: text output only
                self._factory = lambda n: None  # noqa: ARG005
                return
            if self.dashboard is None:
                return
            self.dashboard.display()
            for early in self._early_states.values():
                self.dashboard(early)
            self._early_states.clear()
        self.dashboard(event)

    def finish(self, result: Any = None) -> None:
        if self.dashboard is not None:
            self.dashboard.finish(result)
