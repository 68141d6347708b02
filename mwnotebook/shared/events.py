"""Events a cluster run emits, consumed by the output relay, the dashboard and the CLI.

They are plain frozen dataclasses so that observers stay pure and testable with fake events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, Union

#: MIME type under which workers publish metric records (see ``mwnotebook.worker``).
METRICS_MIME = "application/vnd.mwnotebook.metrics+json"


#: Where a worker is: ``starting`` (its kernel is being started), ``idle`` (ready, no cell),
#: ``running`` (a cell), ``done`` / ``failed`` (the cell ended), ``stopped`` (the kernel is gone).
WorkerState = Literal["starting", "idle", "running", "done", "failed", "stopped"]

#: The IOPub messages that carry a worker's output.
OutputMsgType = Literal["stream", "display_data", "update_display_data", "execute_result", "error",
                        "clear_output"]


class IOPubContent(TypedDict, total=False):
    """The ``content`` of an output message, by the Jupyter messaging spec (each type has some keys)."""

    name: Literal["stdout", "stderr"]  # stream
    text: str  # stream
    data: dict[str, Any]  # display_data, update_display_data, execute_result: MIME type -> value
    metadata: dict[str, Any]
    transient: dict[str, Any]  # display_data: {"display_id": ...}
    execution_count: int  # execute_result
    ename: str  # error
    evalue: str  # error
    traceback: list[str]  # error
    wait: bool  # clear_output


@dataclass(frozen=True)
class WorkerStateChanged:
    """A worker moved to another :data:`WorkerState`."""

    worker: int
    state: WorkerState
    error: str = ""  # short error name when state == "failed", e.g. "ValueError"


@dataclass(frozen=True)
class WorkerOutput:
    """One IOPub message with output from a worker (stream, display_data, execute_result, error)."""

    worker: int
    msg_type: OutputMsgType
    content: IOPubContent


@dataclass(frozen=True)
class WorkerMetrics:
    """Metric records a worker reported with ``mw.report`` or the Keras callback."""

    worker: int
    records: tuple[dict[str, Any], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class RunRestarted:
    """The cell lost workers and was started again on fresh ones (``--max-restarts``).

    Sent once the new workers are ready and before the cell is sent to them again; everything a
    worker sends after it belongs to attempt ``attempt + 1``.
    """

    #: Which restart this is (1 for the first), of at most ``max_restarts``.
    restart: int
    max_restarts: int
    #: The cause, one line: ``worker 1 died (SIGKILL)``.
    cause: str
    #: The worker that was lost first (None when not one worker's fault).
    worker: int | None = None
    #: The last epoch / step any worker reported in the lost attempt (None: none reported).
    epoch: int | None = None
    step: float | None = None
    #: Wall-clock time (``time.time()``) when the loss was seen, and seconds from then until the
    #: fresh workers were ready.
    lost_at: float = 0.0
    restart_seconds: float = 0.0
    #: Where workers came back when not in place, one line each: ``node mwnode1 lost; worker 1
    #: restarted on node mwnode2`` (Slurm, ``launchers/slurm/launcher.py``).
    moved: tuple[str, ...] = ()

    def summary(self) -> str:
        """The short line shown in the cell, e.g.
        ``worker 1 died (SIGKILL) at epoch 3; restart 1 of 3, 0.4 s``."""
        where = ""
        if self.epoch is not None:
            where = f" at epoch {self.epoch + 1}"  # Keras counts epochs from 1 on screen
        elif self.step is not None:
            where = f" at step {self.step:g}"
        return (f"{self.cause}{where}; restart {self.restart} of {self.max_restarts}, "
                f"{self.restart_seconds:.1f} s")


@dataclass(frozen=True)
class WorkerResources:
    """A worker's CPU share and resident memory, read on its own host while a cell runs
    (mwnotebook/engine/usage.py); None where they could not be read."""

    worker: int
    cpu_percent: float | None
    memory_bytes: int | None
    memory_limit: int | None = None
    near_limit: bool = False


Event = Union[WorkerStateChanged, WorkerOutput, WorkerMetrics, RunRestarted, WorkerResources]
EventSink = Callable[[Event], None]
