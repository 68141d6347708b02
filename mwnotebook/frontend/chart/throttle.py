"""At most a few frontend updates a second, however fast events come; a pending change is sent by a
timer even when no further event comes.

Workers may report thousands of points per second; each update is a message the browser must
draw. Events only mark the state dirty; :meth:`Throttle.changed` sends at once when the last update
is at least one interval old, otherwise a timer sends the latest state when the interval is over.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class Throttle:
    """Calls ``push`` at most ``rate`` times a second. All methods are called with ``lock`` held
    (the owner's lock), and so is ``push``."""

    def __init__(self, push: Callable[[], None], rate: float, lock: threading.RLock,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._push = push
        self._interval = 1.0 / rate
        self._lock = lock
        self._clock = clock
        self._dirty = False
        self._timer: threading.Timer | None = None
        self._last = -math.inf
        #: When each update was sent (for rate measurements).
        self.times: list[float] = []

    def changed(self) -> None:
        self._dirty = True
        wait = self._interval - (self._clock() - self._last)
        if wait <= 0:
            self._cancel_timer()
            self._send()
        elif self._timer is None:
            timer = threading.Timer(wait, self._on_timer)
            timer.args = (timer,)
            timer.daemon = True
            self._timer = timer
            timer.start()

    def flush(self, force: bool = False) -> None:
        """Send a pending change now (ignores the rate); ``force`` sends even with none pending."""
        self._cancel_timer()
        if self._dirty or force:
            self._send()

    def cancel(self) -> None:
        self._cancel_timer()
        self._dirty = False

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self, timer: threading.Timer) -> None:
        with self._lock:
            if self._timer is not timer:
                return  # superseded: an update went out while this timer waited for the lock
            self._timer = None
            if self._dirty:
                self.changed()

    def _send(self) -> None:
        self._dirty = False
        self._push()
        # Measured from the END of this update: however long an update takes (a starved kernel),
        # two updates leave at least one interval apart.
        self._last = self._clock()
        self.times.append(self._last)
