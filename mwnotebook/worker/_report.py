"""Worker side of live metrics: ``mw.report(step=..., **metrics)``, buffered and sent in batches.

Runs inside each worker kernel (re-exported by :mod:`mwnotebook.worker`). Records travel over the
kernel's own IOPub channel as ``display_data`` whose data holds :data:`METRICS_MIME` with the
payload ``{"records": [...]}``; the notebook's relay turns them into ``WorkerMetrics`` events and
never shows them as output. No extra sockets or files.

Cost model (why it is built this way):

* ``report`` only appends to a buffer. Tensors are kept as they are and converted to floats when
  the buffer is flushed (at most every :data:`FLUSH_INTERVAL` seconds, and when the cell ends), so a
  training loop is not forced to wait for the device at every step; one flush converts everything
  buffered since the last one.
* Inside a ``tf.function`` the values are symbolic; ``report`` then inserts a ``tf.py_function``
  that buffers the concrete values when the step runs (not possible under ``jit_compile=True``).
* A ``post_run_cell`` hook flushes what is left when the cell ends, so nothing is lost; a short
  timer flushes a buffer that would otherwise wait for the next report (e.g. during evaluation).

Local and global values: by convention ``loss`` is the worker's own value and ``global_loss`` the
value over all workers (see :mod:`mwnotebook.shared.metrics`). Values are converted by
:mod:`mwnotebook.worker._values`; the Keras callback (:mod:`mwnotebook.worker._keras`) reports
through the same :class:`Reporter`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from mwnotebook.shared.events import METRICS_MIME
from mwnotebook.worker._values import _json_value, _needs_graph, _snapshot, _tf, _to_number

log = logging.getLogger(__name__)

#: Seconds between two flushes (so at most ~10 display_data messages per second per worker).
FLUSH_INTERVAL = 0.1
#: A flush is forced when this many records are buffered, whatever the interval.
MAX_BUFFER = 5000


class MetricValueWarning(UserWarning):
    """``mw.report`` got a value that is not a number (it is left out; the cell goes on)."""


#: Values that can never be a metric (numbers, numpy scalars and tensors are checked at flush).
_NOT_NUMBERS = (str, bytes, list, tuple, dict, set, type(None))


def _warn_not_a_number(name: str, value: Any) -> None:
    """Say so in this worker's output (once per call site, Python's default for warnings)."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    warnings.warn(f"mw.report: {name}={text} is not a number ({type(value).__name__}), so it is not "
                  "plotted; report ints, floats, numpy scalars or scalar tensors", MetricValueWarning,
                  stacklevel=4)


def _worker_index() -> int | None:
    text = os.environ.get("MWNOTEBOOK_WORKER_INDEX")
    return int(text) if text and text.isdigit() else None


def _publish_ipython(records: list[dict[str, Any]]) -> bool:
    """Send records as display_data from this kernel; False when not inside an IPython kernel."""
    try:
        from IPython import get_ipython
        from IPython.display import publish_display_data
    except ImportError:  # pragma: no cover - IPython is a dependency
        return False
    if get_ipython() is None:
        return False
    publish_display_data({METRICS_MIME: {"records": records}})
    return True


class Reporter:
    """Buffers records and publishes them in batches (one per worker process, see :func:`reporter`)."""

    def __init__(self, publish: Callable[[list[dict[str, Any]]], bool] = _publish_ipython,
                 interval: float = FLUSH_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self._publish = publish
        self._interval = interval
        self._clock = clock
        self._lock = threading.RLock()
        self._buffer: list[tuple[Any, float, dict[str, Any]]] = []
        self._last_flush = -math.inf
        self._timer: threading.Timer | None = None
        self._next_step = 0
        self._hooked_shell: Any = None
        self._warned_no_kernel = False
        self.published_batches = 0
        self.published_records = 0

    # -- recording ---------------------------------------------------------------------------
    def report(self, step: Any = None, **metrics: Any) -> None:
        """Record one point per metric at ``step`` (see :func:`report`)."""
        if not metrics:
            raise TypeError("report() needs at least one metric, e.g. report(step=i, loss=loss)")
        for name in metrics:
            if name in ("worker", "time", "kind"):
                raise TypeError(f"{name!r} is reserved in metric records; use another name")
        bad = [name for name, value in metrics.items() if isinstance(value, _NOT_NUMBERS)]
        if bad:
            for name in bad:
                _warn_not_a_number(name, metrics.pop(name))
            if not metrics:
                return
        if _needs_graph((step, *metrics.values())):
            self._report_from_graph(step, metrics)
            return
        if self._hooked_shell is None:
            self.install_hook()
        self.add(step, {k: _snapshot(v) for k, v in metrics.items()})

    def add(self, step: Any, values: dict[str, Any], *, extra: dict[str, Any] | None = None) -> None:
        """Buffer one record (values may still be tensors or :class:`_Lazy`); flush if due."""
        with self._lock:
            if step is None:
                step = self._next_step
            self._buffer.append((_snapshot(step), time.time(), dict(values, **(extra or {}))))
            due = self._clock() - self._last_flush >= self._interval
            if due or len(self._buffer) >= MAX_BUFFER:
                self._flush_locked()
            else:
                self._arm_timer()
            if isinstance(step, int):
                self._next_step = step + 1
            else:
                self._next_step += 1

    def _report_from_graph(self, step: Any, metrics: dict[str, Any]) -> None:
        """Inside a tf.function: buffer the values when the step executes, via tf.py_function."""
        tf = _tf()
        names = list(metrics)
        has_step = step is not None
        inputs = ([tf.convert_to_tensor(step)] if has_step else []) + [
            tf.convert_to_tensor(metrics[n]) for n in names
        ]

        def _buffer(*values: Any) -> list[Any]:
            step_value = _to_number(values[0]) if has_step else None
            rest = values[1:] if has_step else values
            self.add(step_value, dict(zip(names, rest)))
            return []

        # Install the hook now, from the Python thread that traces (the cell's thread).
        self.install_hook()
        tf.py_function(_buffer, inputs, Tout=[], name="mwnotebook_report")

    # -- flushing ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Publish everything buffered now (also called when the cell ends)."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last_flush = self._clock()
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        worker = _worker_index()
        records = []
        for step, stamp, values in batch:
            record: dict[str, Any] = {"step": _json_value(step), "time": stamp}
            if worker is not None:
                record["worker"] = worker
            for name, value in values.items():
                record[name] = _json_value(value)
            records.append(record)
        if self._publish(records):
            self.published_batches += 1
            self.published_records += len(records)
        elif not self._warned_no_kernel:
            self._warned_no_kernel = True
            log.info("mwnotebook.worker.report: not inside a kernel, records are dropped")

    def _arm_timer(self) -> None:
        if self._timer is not None:
            return
        delay = max(0.0, self._interval - (self._clock() - self._last_flush))
        timer = threading.Timer(delay, self.flush)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def install_hook(self) -> None:
        if self._hooked_shell is not None:
            return
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover
            return
        shell = get_ipython()
        if shell is None:
            return
        shell.events.register("post_run_cell", self._post_run_cell)
        self._hooked_shell = shell

    def _post_run_cell(self, result: Any = None) -> None:
        self.flush()
        with self._lock:
            self._next_step = 0  # each cell is a new run (and a new chart): default steps restart


_REPORTER: Reporter | None = None
_REPORTER_LOCK = threading.Lock()


def reporter() -> Reporter:
    """The process-wide :class:`Reporter` (made on first use)."""
    global _REPORTER
    with _REPORTER_LOCK:
        if _REPORTER is None:
            _REPORTER = Reporter()
        return _REPORTER


def report(step: Any = None, **metrics: Any) -> None:
    """Report metric values at ``step`` to the notebook's live dashboard.

    ``mw.report(step=i, loss=local_loss, global_loss=global_loss)``: name the value each worker
    computes on its own shard ``loss`` (one curve per worker) and a value reduced over all workers
    ``global_loss`` (one "global" curve). Values may be Python or numpy numbers, tensors or
    variables; inside a ``tf.function`` they are recorded when the step runs. ``step`` defaults
    to one more than the previous step (0 for the first report of a cell). Outside a kernel (a plain script)
    reporting does nothing.
    """
    reporter().report(step, **metrics)


def flush() -> None:
    """Send buffered records now (normally not needed: the cell end flushes)."""
    reporter().flush()
