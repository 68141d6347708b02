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


Event = Union[WorkerStateChanged, WorkerOutput, WorkerMetrics]
EventSink = Callable[[Event], None]
