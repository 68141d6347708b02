"""What a cell run on the cluster produced, per worker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mwnotebook.engine.connection import ExecutionOutcome
from mwnotebook.shared.events import Event, WorkerMetrics, WorkerOutput


@dataclass
class RunResult:
    """Outputs, outcomes and metric records of one cell on every worker."""

    num_workers: int
    outcomes: list[ExecutionOutcome | None] = field(default_factory=list)
    outputs: list[list[WorkerOutput]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0
    #: Each worker's output log: every stream output its cells sent, appended cell after cell.
    log_paths: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.outcomes:
            self.outcomes = [None] * self.num_workers
        if not self.outputs:
            self.outputs = [[] for _ in range(self.num_workers)]

    def add(self, event: Event) -> None:
        if isinstance(event, WorkerOutput):
            self.outputs[event.worker].append(event)
        elif isinstance(event, WorkerMetrics):
            self.metrics.extend(event.records)

    def _stream(self, worker: int, name: str) -> str:
        return "".join(o.content.get("text", "") for o in self.outputs[worker]
                       if o.msg_type == "stream" and o.content.get("name") == name)

    def stdout(self, worker: int) -> str:
        """Everything worker ``worker`` printed to stdout during the cell."""
        return self._stream(worker, "stdout")

    def stderr(self, worker: int) -> str:
        return self._stream(worker, "stderr")

    def metrics_frame(self) -> Any:
        """The metric records as a pandas DataFrame (pandas must be installed)."""
        from mwnotebook.shared.metrics import records_to_dataframe

        return records_to_dataframe(self.metrics)

    @property
    def output_complete(self) -> bool:
        """False when some worker output never reached the notebook (see :meth:`lost_output`)."""
        return all(o is None or o.output_complete for o in self.outcomes)

    def lost_output(self) -> dict[int, dict[str, int]]:
        """Per worker, characters per stream that it wrote but the notebook never received."""
        return {i: dict(o.lost_chars) for i, o in enumerate(self.outcomes) if o is not None and o.lost_chars}

    @property
    def ok(self) -> bool:
        return all(o is not None and o.status == "ok" for o in self.outcomes)
