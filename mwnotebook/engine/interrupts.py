"""Ctrl-C while a blocking call waits for the cluster, delivered as a queue item, not as an exception.

Python raises ``KeyboardInterrupt`` at whatever bytecode the main thread runs when SIGINT arrives,
also on the few instructions of a wait loop that no ``try`` covers (the loop's own jump back): the
interrupt then escapes the cell as a bare ``KeyboardInterrupt`` instead of stopping the workers
(seen in full test runs: about one run in three). While :class:`SigintToQueue` is active, SIGINT
puts a marker into the wait loop's queue instead, and the loop handles it where it chooses.
Only the main thread can own a signal handler, and only Python's own raising handler (also what
IPython kernels use while a cell runs) is replaced; anywhere else the caller still sees
``KeyboardInterrupt`` and treats it the same way.
"""

from __future__ import annotations

import queue
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

#: The item SIGINT puts into the queue.
INTERRUPT = object()


class SigintToQueue:
    """Context manager: while active, SIGINT puts :data:`INTERRUPT` into ``events``."""

    def __init__(self, events: queue.SimpleQueue[Any]) -> None:
        self._events = events
        self._previous: Any = None
        self.active = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._events.put(INTERRUPT)  # SimpleQueue.put is safe to call from a signal handler

    def __enter__(self) -> SigintToQueue:
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self.active = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.active:
            signal.signal(signal.SIGINT, self._previous)
            self.active = False
