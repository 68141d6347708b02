"""One object per process, made on first use.

The notebook's background event loop, the templates kept on Ray nodes for the notebook's process, and a
worker's reporter and step clock are resources of the process they live in (a thread, Ray actors, hooks
in the kernel), not facts a caller decides: whoever asks gets the same one. :class:`ProcessWide` is that
rule written once; the modules that own such an object hold one at module level.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ProcessWide(Generic[T]):
    """The one instance ``make()`` returns, made under a lock by the first caller of :meth:`get`."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._instance: T | None = None

    def get(self) -> T:
        with self._lock:
            if self._instance is None:
                self._instance = self._make()
            return self._instance
