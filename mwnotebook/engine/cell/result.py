"""What a cell run on the cluster produced, per worker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mwnotebook.engine.workers.worker import ExecutionOutcome
from mwnotebook.shared.events import Event, RunRestarted, WorkerMetrics, WorkerOutput


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
    #: Every restart of the cell (``--max-restarts``), in order: cause, time, restart number.
    restarts: list[RunRestarted] = field(default_factory=list)
    #: Per attempt after the first, the index in each worker's ``outputs`` where it begins.
    attempt_starts: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.outcomes:
            self.outcomes = [None] * self.num_workers
        if not self.outputs:
            self.outputs = [[] for _ in range(self.num_workers)]

    def add(self, event: Event) -> None:
        """Keep a worker's output or metric records from one of the run's events."""
        if isinstance(event, WorkerOutput):
            self.outputs[event.worker].append(event)
        elif isinstance(event, WorkerMetrics):
            self.metrics.extend(event.records)

    @classmethod
    def of_attempts(cls, results: list[RunResult], restarts: list[RunRestarted]) -> RunResult:
        """One result for a cell that ran ``len(results)`` times: the last attempt's outcomes, every
        attempt's output and metrics in order (each record with its ``attempt``), the restarts."""
        last = results[-1]
        if len(results) == 1 and not restarts:
            return last
        merged = cls(last.num_workers, outcomes=list(last.outcomes), log_paths=list(last.log_paths),
                     elapsed=sum(r.elapsed for r in results), restarts=list(restarts))
        for number, result in enumerate(results, start=1):
            if number > 1:
                merged.attempt_starts.append([len(o) for o in merged.outputs])
            for worker, outputs in enumerate(result.outputs):
                merged.outputs[worker].extend(outputs)
            merged.metrics.extend(dict(record, attempt=number) for record in result.metrics)
        return merged

    @property
    def attempts(self) -> int:
        """How many times the cell ran (1 without restarts)."""
        return len(self.attempt_starts) + 1

    def _outputs(self, worker: int, attempt: int | None) -> list[WorkerOutput]:
        outputs = self.outputs[worker]
        if attempt is None:
            return outputs
        if not 1 <= attempt <= self.attempts:
            raise ValueError(f"attempt must be between 1 and {self.attempts}, got {attempt!r}")
        starts = [0] + [s[worker] for s in self.attempt_starts] + [len(outputs)]
        return outputs[starts[attempt - 1]:starts[attempt]]

    def _stream(self, worker: int, name: str, attempt: int | None = None) -> str:
        return "".join(o.content.get("text", "") for o in self._outputs(worker, attempt)
                       if o.msg_type == "stream" and o.content.get("name") == name)

    def stdout(self, worker: int, attempt: int | None = None) -> str:
        """Everything worker ``worker`` printed to stdout during the cell (every attempt, in order,
        or only ``attempt``: 1 for the first run, 2 after the first restart, ...)."""
        return self._stream(worker, "stdout", attempt)

    def stderr(self, worker: int, attempt: int | None = None) -> str:
        """What ``worker`` wrote to stderr (one attempt's only, with ``attempt``), as :meth:`stdout` does."""
        return self._stream(worker, "stderr", attempt)

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
        """Whether every worker's cell ended with status ``ok``."""
        return all(o is not None and o.status == "ok" for o in self.outcomes)
