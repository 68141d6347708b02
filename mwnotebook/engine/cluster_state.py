"""The state of each task of a cluster, as its events leave it, and the one place those events pass.

:class:`~mwnotebook.engine.async_cluster.AsyncCluster` holds one :class:`TaskStates` and hands
:meth:`TaskStates.sink` to whoever makes events (its worker group, a cell's run), so every
:class:`~mwnotebook.shared.events.WorkerStateChanged` is recorded before the caller's observer hears it.
"""

from __future__ import annotations

import logging

from mwnotebook.shared.events import Event, EventSink, WorkerStateChanged

log = logging.getLogger(__name__)


def ignore_event(_: Event) -> None:
    """The event sink of an operation nobody watches."""


class TaskStates:
    """Each cell kernel's state (``stopped``, ``starting``, ``idle``, ``running``, ``notebook``, ...)."""

    def __init__(self, count: int) -> None:
        self._states: list[str] = ["stopped"] * count

    def snapshot(self) -> list[str]:
        return list(self._states)

    def set(self, index: int, state: str) -> None:
        """A state no event announces (this process as the coordinator, a stop)."""
        self._states[index] = state

    def sink(self, emit: EventSink) -> EventSink:
        """``emit`` (the sink of the operation the events belong to, handed down, never kept), after
        the states are recorded."""
        def observe(event: Event) -> None:
            self.observe(event, emit)
        return observe

    def observe(self, event: Event, emit: EventSink) -> None:
        if isinstance(event, WorkerStateChanged):
            self._states[event.worker] = event.state
        try:
            emit(event)
        except Exception:  # a broken observer must not break the run
            log.exception("event observer failed on %r", event)
