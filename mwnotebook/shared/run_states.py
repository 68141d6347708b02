"""Each worker's state as an observer of one run shows it, from the cluster's
:class:`~mwnotebook.shared.events.WorkerStateChanged` events: the one rule the status table
(``frontend/chart/status.py``) and the ``mwnotebook`` command's report (``frontend/cli/command.py``)
both follow.

The rule: once a worker has run, the cluster's between-cells states (``starting``, ``idle``,
``stopped``: a restart after a failure, a stop) no longer replace its state, so that the table and
the report keep how the run ended, not the fresh kernels; a new ``running`` (the next cell) does.
The cluster itself keeps the processes' present state (``engine/cluster_state.py``).
"""

from __future__ import annotations

from mwnotebook.shared.events import WorkerStateChanged

#: The cluster's states between cells (the processes' lifecycle), as opposed to a cell's.
LIFECYCLE_STATES = frozenset({"starting", "idle", "stopped"})


class RunStates:
    """Every worker's run state and error (the error only while ``failed``). Not thread-safe:
    its reader holds its own lock."""

    def __init__(self, workers: int, initial: str = "starting") -> None:
        self._initial = initial
        self.states = [initial] * workers
        self.errors = [""] * workers
        self._ran = [False] * workers

    def _grow(self, worker: int) -> None:
        """More workers than announced: track them too."""
        while len(self.states) <= worker:
            self.states.append(self._initial)
            self.errors.append("")
            self._ran.append(False)

    def apply(self, event: WorkerStateChanged) -> bool:
        """Apply a state change; False when the rule ignores it."""
        self._grow(event.worker)
        if self._ran[event.worker] and event.state in LIFECYCLE_STATES:
            return False
        if event.state not in LIFECYCLE_STATES:
            self._ran[event.worker] = True
        self.states[event.worker] = event.state
        self.errors[event.worker] = event.error if event.state == "failed" else ""
        return True

    def progressed(self, worker: int) -> None:
        """The worker reported progress (metrics): a worker still shown between cells is running."""
        self._grow(worker)
        if self.states[worker] in ("starting", "idle"):
            self.states[worker] = "running"
            self._ran[worker] = True

    def record(self, worker: int, state: str, error: str = "") -> None:
        """Set a worker's final state from the run's verdict (say, ``unresponsive``), whatever came before."""
        self._grow(worker)
        self.states[worker], self.errors[worker], self._ran[worker] = state, error, True

    def state(self, worker: int) -> str:
        self._grow(worker)
        return self.states[worker]

    def error(self, worker: int) -> str:
        self._grow(worker)
        return self.errors[worker]
