"""What a run measured, collected from its events as they pass: every metric record (each with
its ``worker`` and ``attempt``) and the restarts. Kept whatever the run's end, so a failed or
interrupted run's measurements reach the history too."""

from __future__ import annotations

from typing import Any

from mwnotebook.shared.events import Event, RunRestarted, WorkerMetrics


class RunCollector:
    """An event sink (``%%mwtrain`` fans its events out to it, beside the chart and the output)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.restarts = 0
        self._attempt = 1

    def __call__(self, event: Event) -> None:
        if isinstance(event, WorkerMetrics):
            attempt = self._attempt
            for record in event.records:
                row = dict(record)
                row.setdefault("worker", event.worker)
                row["attempt"] = attempt
                self.records.append(row)
        elif isinstance(event, RunRestarted):
            self.restarts += 1
            self._attempt += 1
