"""What an :class:`~mwnotebook.engine.async_cluster.AsyncCluster` holds: its spec, launcher, workers,
addresses and each task's state, and the one place its events pass (worker states kept there).

The cluster is assembled from one class per concern, each subclassing the one before:
this state, the tasks that do not run the cell (engine/roles/task_roles.py), starting and stopping the
workers (engine/workers/lifecycle.py), one cell's run with its restarts (engine/cell/with_restarts.py),
and what one can ask of the cluster (engine/async_cluster.py).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mwnotebook.config.roles import layout_of
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.engine.cell.late_output import LateOutput
from mwnotebook.engine.cell.restarts import HOST_WAIT_SECONDS
from mwnotebook.engine.roles.task_servers import TaskServers
from mwnotebook.engine.workers.connection import Worker
from mwnotebook.launchers import Launcher
from mwnotebook.launchers.capabilities import Isolates
from mwnotebook.shared.events import Event, EventSink, WorkerState, WorkerStateChanged

log = logging.getLogger(__name__)


def ignore_event(_: Event) -> None:
    """The event sink of an operation nobody watches."""


class ClusterState:
    """The state of N worker kernels that run cells in lockstep. All methods run on one event loop."""

    def __init__(self, spec: ClusterSpec | None = None, *, launcher: Launcher | None = None,
                 **spec_fields: Any) -> None:
        if spec is not None and spec_fields:
            raise TypeError("pass either a ClusterSpec or its fields, not both")
        self.spec = spec if spec is not None else ClusterSpec(**spec_fields)
        self._launcher = launcher
        self._workers: list[Worker] = []
        self._envs: list[dict[str, str]] = []
        self._addresses: list[str] = []
        #: --coordinator notebook: no kernel runs the cell; this process coordinates
        #: (engine/roles/notebook_coordinator.py). True once it has the chief's TF_CONFIG.
        self._notebook = self.spec.coordinator == "notebook"
        self._joined = False
        #: Kernels that run the cell: every replica, or a --ps cluster's coordinator alone.
        self._cell_count = 0 if self._notebook else len(layout_of(self.spec).cell_tasks())
        #: A --ps cluster's worker and ps servers (engine/roles/task_servers.py); None otherwise.
        self._servers: TaskServers | None = None
        #: Aborts a --ps cluster's cell PS_LOSS_GRACE s after a lost ps, unless the servers are renewed first.
        self._ps_loss_timer: asyncio.TimerHandle | None = None
        self._states: list[str] = ["stopped"] * max(self.spec.workers, self._cell_count)
        self._abort: asyncio.Event | None = None
        self._running = False
        self._start_task: asyncio.Future[None] | None = None
        self._release_task: asyncio.Future[None] | None = None
        self._cell_code: str | None = None
        #: ``--max-restarts``: how long fresh workers may fail to start before the cell gives up.
        self.restart_host_wait = HOST_WAIT_SECONDS
        #: Where workers moved in a restart still under way (lines for its RunRestarted).
        self._moved: list[str] = []
        #: Output workers send after their cell ended (mwnotebook/engine/cell/late_output.py).
        self.late_output = LateOutput()

    @property
    def started(self) -> bool:
        return bool(self._workers) or self._joined

    @property
    def addresses(self) -> list[str]:
        return list(self._addresses)

    @property
    def network_isolated(self) -> bool:
        """True when the workers' TensorFlow ports sit in a private network namespace."""
        return isinstance(self._launcher, Isolates) and self._launcher.isolated

    @property
    def tf_configs(self) -> list[dict[str, Any]]:
        layout = layout_of(self.spec)
        return [layout.tf_config(self._addresses, t) for t in layout.cell_tasks()] if self._addresses else []

    def _start_finished(self, task: asyncio.Future[None]) -> None:
        if self._start_task is task:
            self._start_task = None
        if not task.cancelled():
            task.exception()  # retrieved here so a failed background start is not logged as lost

    async def _drop_release(self) -> None:
        if self._release_task is not None:
            self._release_task.cancel()
            await asyncio.gather(self._release_task, return_exceptions=True)
            self._release_task = None

    async def _finish_pending_start(self) -> None:
        """Let a start that is under way complete, so that stop/kill see (and end) every kernel."""
        if self._start_task is not None:
            await asyncio.gather(asyncio.shield(self._start_task), return_exceptions=True)

    async def _close_launcher(self) -> None:
        if self._launcher is not None:
            await self._launcher.close()
            self._launcher = None

    def _set_state(self, index: int, state: WorkerState, emit: EventSink, error: str = "") -> None:
        self._observe(WorkerStateChanged(worker=index, state=state, error=error), emit)

    def _observe(self, event: Event, emit: EventSink) -> None:
        """Every event of the cluster passes here: worker states are kept, then ``emit`` (the sink of
        the operation the event belongs to, handed down, never kept on the cluster) is told."""
        if isinstance(event, WorkerStateChanged):
            self._states[event.worker] = event.state
        try:
            emit(event)
        except Exception:  # a broken observer must not break the run
            log.exception("event observer failed on %r", event)
