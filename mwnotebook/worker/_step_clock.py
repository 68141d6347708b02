"""A worker's per-step stamps in a tf_keras ``fit``: the step's start, its batch there, its arrival
at the gradient all-reduce, its end; split into the fields of ``mwnotebook/shared/step_times.py``.

The start and end are stamped by the automatic Keras callback (``worker/_keras.py``, batch begin and
end, in Python); the two stamps inside the step by ``tf.py_function`` ops that
``mwnotebook/processes/runtime/step_stamps.py`` puts into tf_keras' ``train_step`` (after the batch
is read) and before its gradient all-reduce. In a custom loop the steps are told apart by ``mw.report``
(``worker/_report.py``): the time from one report to the arrival at the all-reduce, and from there to
the next report. A call of the step function (or a loop's report interval) that reached the all-reduce
more than once (``steps_per_execution`` > 1, two optimizers) gives no figures: they would not be one
step's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from mwnotebook.shared.process_wide import ProcessWide
from mwnotebook.shared.step_times import INPUT_KEY, OWN_KEY, WAIT_KEY


class StepListener(Protocol):
    """Told of every step the clock sees (``worker/_profile.py``: the profiler's window of steps)."""

    def step_begins(self) -> None: ...

    def step_ended(self, split: dict[str, float]) -> None: ...

    def reported(self, split: dict[str, float]) -> None: ...


class StepClock:
    """The stamps of the current step (one per worker process, see :func:`step_clock`)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._begin: float | None = None
        self._input: float | None = None
        self._collective: float | None = None
        self._arrivals = 0
        self._last_report: float | None = None
        self.listener: StepListener | None = None

    def begin_step(self) -> None:
        listener = self.listener
        if listener is not None:  # before the step's clock starts: starting a profiler is not the step's time
            listener.step_begins()
        with self._lock:
            self._begin, self._input, self._collective, self._arrivals = self._clock(), None, None, 0

    def input_ready(self, *_tensors: Any) -> float:
        """Called by the step (``tf.py_function``) once its batch is there."""
        now = self._clock()
        with self._lock:
            if self._input is None:
                self._input = now
        return now

    def at_collective(self, *_tensors: Any) -> float:
        """Called by the step (``tf.py_function``) once its gradients are computed."""
        now = self._clock()
        with self._lock:
            self._collective = now
            self._arrivals += 1
        return now

    def end_step(self) -> dict[str, float]:
        """The step's split in seconds (empty when the step was not stamped inside)."""
        end = self._clock()
        with self._lock:
            begin, arrived, ready = self._begin, self._collective, self._input
            once = self._arrivals == 1
            self._begin = None
        split: dict[str, float] = {}
        if begin is not None and arrived is not None and once and arrived >= begin:
            split = {OWN_KEY: arrived - begin, WAIT_KEY: max(0.0, end - arrived)}
            if ready is not None and begin <= ready <= arrived:
                split[INPUT_KEY] = ready - begin
        listener = self.listener
        if listener is not None:
            listener.step_ended(split)
        return split

    def between_reports(self) -> dict[str, float]:
        """A custom loop's split, called at each ``mw.report``: from the previous report to the
        arrival at the all-reduce (own), from there to this report (wait). Empty for the first report,
        or when the step did not reach a stamped all-reduce exactly once since the last report."""
        now = self._clock()
        with self._lock:
            last, arrived, once = self._last_report, self._collective, self._arrivals == 1
            self._last_report, self._arrivals = now, 0
        split: dict[str, float] = {}
        if last is not None and arrived is not None and once and last <= arrived <= now:
            split = {OWN_KEY: arrived - last, WAIT_KEY: now - arrived}
        listener = self.listener
        if listener is not None:
            listener.reported(split)
        return split


_CLOCK = ProcessWide(StepClock)


def step_clock() -> StepClock:
    """The process-wide :class:`StepClock` (made on first use)."""
    return _CLOCK.get()
