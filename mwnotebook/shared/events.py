"""Events a cluster run emits, consumed by the output relay, the dashboard and the CLI.

They are plain frozen dataclasses so that observers stay pure and testable with fake events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

#: MIME type under which workers publish metric records (see ``mwnotebook.worker``).
METRICS_MIME = "application/vnd.mwnotebook.metrics+json"


@dataclass(frozen=True)
class WorkerStateChanged:
    """A worker moved to ``starting`` | ``running`` | ``done`` | ``failed`` | ``stopped``."""

    worker: int
    state: str
    error: str = ""  # short error name when state == "failed", e.g. "ValueError"


@dataclass(frozen=True)
class WorkerOutput:
    """One IOPub message with output from a worker (stream, display_data, execute_result, error)."""

    worker: int
    msg_type: str
    content: dict[str, Any]


@dataclass(frozen=True)
class WorkerMetrics:
    """Metric records a worker reported with ``mw.report`` or the Keras callback."""

    worker: int
    records: tuple[dict[str, Any], ...] = field(default_factory=tuple)


Event = Union[WorkerStateChanged, WorkerOutput, WorkerMetrics]
EventSink = Callable[[Event], None]
