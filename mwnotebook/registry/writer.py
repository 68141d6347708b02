"""The state file's writer: one thread that writes the document when it changed, at most once per interval.

Callers only mark the document changed (:meth:`StateWriter.mark`, cheap, from any thread); the
thread asks for the document (``render``, which may take its time: a cluster's status) and replaces
the file atomically (registry/state.py). While ``watch`` is on, the thread also calls the watch
function once per interval and writes when it says something changed (a cluster restarting in the
background, whose fresh workers nobody announces). After :meth:`close` returns the file is never
written again, so the caller can remove it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mwnotebook.registry import state

log = logging.getLogger(__name__)


class StateWriter:
    """Writes ``render()`` to ``path`` on a daemon thread named ``name``."""

    def __init__(self, path: Path, render: Callable[[], dict[str, Any]], interval: float, name: str,
                 watch: Callable[[], bool] | None = None) -> None:
        self.path = path
        self._render = render
        self._interval = interval
        self._watch = watch
        self._watching = False
        self._cond = threading.Condition()
        self._file_lock = threading.Lock()
        self._dirty = False
        self._closed = False
        self._last_write = 0.0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def mark(self, now: bool = False) -> None:
        """The document changed: written within ``interval`` (``now``: at once)."""
        with self._cond:
            self._dirty = True
            if now:
                self._last_write = 0.0
            self._cond.notify_all()

    def watching(self, on: bool) -> None:
        """Call ``watch`` once per interval while ``on`` (it returns True when the document changed)."""
        with self._cond:
            self._watching = on and self._watch is not None
            self._cond.notify_all()

    def close(self) -> None:
        """Stop writing; once this returns the file is not written again."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        with self._file_lock:
            pass  # a write under way has ended

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._closed:
                    self._cond.wait(self._interval if self._watching else None)
                    if self._watching and not self._closed and self._watch is not None and self._watch():
                        self._dirty = True
                if self._closed:
                    return
                delay = self._last_write + self._interval - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)  # coalesce; a `now` mark resets _last_write and wakes us
                    continue
                self._dirty = False
            try:
                document = self._render()
            except Exception:
                log.debug("the state document could not be made", exc_info=True)
                continue
            with self._file_lock:
                if self._closed:
                    return
                try:
                    state.write_state(self.path, document)
                except OSError:
                    log.warning("could not write %s", self.path, exc_info=True)
            self._last_write = time.monotonic()
