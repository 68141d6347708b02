"""What the ``mwnotebook run`` command sees of a run: worker output printed live and labelled, each
worker's state and error, the metrics for the report, and the failure text (the failing worker's
traceback first). The command itself (parsing, the run's life, signals) is ``command.py``."""

from __future__ import annotations

import threading
from typing import TextIO

from mwnotebook.engine.cell.late_output import LateItem, LateOrigin
from mwnotebook.errors import ClusterRunError, render_attempts, render_failures
from mwnotebook.frontend.text.grouping import NO_NAMES, WorkerNames
from mwnotebook.shared.events import Event, RunRestarted, WorkerMetrics, WorkerOutput, WorkerStateChanged
from mwnotebook.shared.run_states import RunStates

#: The origin of output a worker sends after the script ended (a thread it started).
SCRIPT_ORIGIN = LateOrigin("the script")


class RunObserver:
    """Event sink of the CLI: prints worker output live and keeps what the report needs.

    ``workers`` counts the kernels that run the script (config/roles.py ``RoleLayout.cell_tasks``: the
    evaluator's too); ``names`` labels those that are not plain replicas (``[evaluator]``,
    ``[coordinator]``). Called on the command's event loop; the lock only guards against a core
    that would call it from another thread.
    """

    def __init__(self, workers: int, stdout: TextIO, stderr: TextIO, names: WorkerNames = NO_NAMES) -> None:
        from mwnotebook.frontend.text.relay import TextRelay
        from mwnotebook.shared.metrics import MetricsStore

        self.workers = workers
        self.names = names
        self.relay = TextRelay(stdout, stderr, num_workers=workers, names=names)
        self.metrics = MetricsStore()
        #: Each worker's state and error, by the rule the status table follows (shared/run_states.py).
        self.run_states = RunStates(workers)
        self.output: list[list[str]] = [[] for _ in range(workers)]
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, WorkerStateChanged):
                self.run_states.apply(event)
            elif isinstance(event, WorkerMetrics):
                self.metrics.add(event.worker, event.records)
            elif isinstance(event, RunRestarted):  # --max-restarts: marked in the report and the output
                self.metrics.add_restart(event.cause, time=event.lost_at, restart_seconds=event.restart_seconds)
                self.relay(event)
            elif isinstance(event, WorkerOutput):
                self._keep(event)
                self.relay(event)

    def _keep(self, event: WorkerOutput) -> None:
        content = event.content
        if event.msg_type == "stream":
            self.output[event.worker].append(content.get("text", ""))
        elif event.msg_type in ("display_data", "execute_result"):
            text = content.get("data", {}).get("text/plain")
            if text:
                self.output[event.worker].append(text + "\n")

    def late(self, item: LateItem) -> None:
        """Output a worker sent after the script had ended (a thread), labelled so."""
        with self._lock:
            self._keep(WorkerOutput(item.worker, item.msg_type, item.content))
            self.relay.late(item.worker, item.origin.label, item.msg_type, item.content)

    def after_script(self, event: Event) -> None:
        """Events of the wait for the script's threads: their output is late output."""
        if isinstance(event, WorkerOutput):
            with self._lock:
                self._keep(event)
                self.relay.late(event.worker, SCRIPT_ORIGIN.label, event.msg_type, event.content)

    def flush(self) -> None:
        with self._lock:
            self.relay.flush()

    def record_failures(self, exc: ClusterRunError) -> None:
        """Per-worker verdicts from the run's error (the cause first in ``exc.failures``)."""
        with self._lock:
            for failure in exc.failures:
                self.run_states.record(failure.worker, "failed" if failure.kind in ("error", "died")
                                       else failure.kind, failure.headline())

    @property
    def states(self) -> list[str]:
        return self.run_states.states

    @property
    def errors(self) -> list[str]:
        return self.run_states.errors


def describe_failure(exc: ClusterRunError, keep_color: bool = False) -> str:
    """Which worker failed and its traceback first, then what happened to the others."""
    if not exc.failures:
        return f"mwnotebook: {exc}"
    attempts = [f"mwnotebook: {line}" for line in render_attempts(exc.attempts, exc.last_cause())]
    return "\n".join(attempts + render_failures(exc.failures, terminal=True, color=keep_color))
