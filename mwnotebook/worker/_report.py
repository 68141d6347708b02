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

* In a ``--ps`` coordinator, a record holding ``RemoteValue``s stays buffered until they are ready
  (checked without waiting) and is flushed by the timer, never in the training loop's thread
  (:mod:`mwnotebook.worker._remote`).

Each report also carries, where measured, the worker's time from its previous report to its arrival
at the gradient all-reduce and from there to this report (:mod:`mwnotebook.worker._step_clock`), from
which the notebook names a slow worker (``mwnotebook/shared/step_times.py``).

Local and global values: by convention ``loss`` is the worker's own value and ``global_loss`` the
value over all workers (see :mod:`mwnotebook.shared.metrics`). Values are converted by
:mod:`mwnotebook.worker._values`; the Keras callback (:mod:`mwnotebook.worker._keras`) reports
through the same :class:`Reporter`.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from mwnotebook.shared.events import METRICS_MIME
from mwnotebook.shared.process_wide import ProcessWide
from mwnotebook.worker._batch import Entry, split_ready, to_records
from mwnotebook.worker._remote import SCHEDULED, SERVER, has_remote, is_remote
from mwnotebook.worker._remote import wait as wait_remote
from mwnotebook.worker._step_clock import step_clock
from mwnotebook.worker._values import _needs_graph, _snapshot, _tf, _to_number

log = logging.getLogger(__name__)

#: Seconds between two flushes (so at most ~10 display_data messages per second per worker).
FLUSH_INTERVAL = 0.1
#: A flush is forced when this many records are buffered, whatever the interval.
MAX_BUFFER = 5000
#: Seconds the cell's end waits for scheduled steps whose records are buffered (a generous bound:
#: a closure that never completes must not hang the cell; its records are dropped after it).
REMOTE_WAIT = 120.0


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


def _in_ps_coordinator() -> bool:
    """True in a ``--ps`` cluster's coordinator, where ``report(worker=...)`` names a worker server."""
    return _ps_coordinator_for(os.environ.get("TF_CONFIG", ""))


@functools.lru_cache(maxsize=4)
def _ps_coordinator_for(tf_config: str) -> bool:
    """Read once per TF_CONFIG value: ``report(worker=...)`` may come every step."""
    from mwnotebook.worker._ps import ps_task_count
    from mwnotebook.worker._roles import task_type

    return ps_task_count() > 0 and task_type() == "chief"


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
        self._publish_lock = threading.Lock()
        self._buffer: list[Entry] = []
        self._last_flush = -math.inf
        self._timer: threading.Timer | None = None
        self._next_step = 0
        self._waiting = 0  # records left buffered by the last flush (RemoteValues not ready)
        self._remote_buffered = False
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
            if name in ("time", "kind", SERVER) or (name == "worker" and not _in_ps_coordinator()):
                raise TypeError(f"{name!r} is reserved in metric records; use another name")
        if SCHEDULED in metrics and not is_remote(metrics[SCHEDULED]):
            raise TypeError("report(scheduled=...) takes what coordinator.schedule(...) returned (a "
                            f"RemoteValue), not {type(metrics[SCHEDULED]).__name__}")
        if "worker" in metrics:
            metrics[SERVER] = metrics.pop("worker")  # the worker server that computed the values
        bad = [name for name, value in metrics.items() if isinstance(value, _NOT_NUMBERS)]
        if bad:
            for name in bad:
                _warn_not_a_number(name, metrics.pop(name))
            if not metrics or set(metrics) == {SERVER}:
                return
        if _needs_graph((step, *metrics.values())):
            self._report_from_graph(step, metrics)
            return
        if self._hooked_shell is None:
            self.install_hook()
        self.add(step, {k: _snapshot(v) for k, v in metrics.items()}, extra=step_clock().between_reports())

    def add(self, step: Any, values: dict[str, Any], *, extra: dict[str, Any] | None = None) -> None:
        """Buffer one record (values may still be tensors, :class:`_Lazy` or RemoteValues); flush if
        due. A record holding RemoteValues is left to the timer's flush, so the training loop never
        fetches one (worker/_remote.py)."""
        with self._lock:
            if step is None:
                step = self._next_step
            values = dict(values, **(extra or {}))
            self._buffer.append((_snapshot(step), time.time(), values))
            remote = has_remote(step, values)
            self._remote_buffered = self._remote_buffered or remote
            due = self._clock() - self._last_flush >= self._interval and not remote
            due = due or len(self._buffer) - self._waiting >= MAX_BUFFER
            if not due:
                self._arm_timer()
            if isinstance(step, int):
                self._next_step = step + 1
            else:
                self._next_step += 1
        if due:
            self.flush()

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
            self.add(step_value, dict(zip(names, rest)), extra=step_clock().between_reports())
            return []

        # Install the hook now, from the Python thread that traces (the cell's thread).
        self.install_hook()
        tf.py_function(_buffer, inputs, Tout=[], name="mwnotebook_report")

    # -- flushing ----------------------------------------------------------------------------
    def flush(self, wait: float = 0.0) -> None:
        """Publish everything buffered now (also called when the cell ends). Records whose
        RemoteValues are not ready stay buffered; with ``wait`` > 0, wait that many seconds at most
        for them, then drop (and log) those still not ready."""
        with self._publish_lock:  # one flush at a time, so batches go out in order
            if wait > 0 and self._remote_buffered:
                with self._lock:
                    pending = [(step, values) for step, _stamp, values in self._buffer]
                if not wait_remote(pending, self._clock() + wait, self._clock):
                    log.warning("mwnotebook.worker.report: some scheduled steps did not finish within %.0f s "
                                "of the cell's end; their records are dropped", wait)
            with self._lock:
                batch = self._take_ready(drop_waiting=wait > 0)
            records = to_records(batch, _worker_index())
            if records:
                self._send(records)

    def _take_ready(self, drop_waiting: bool) -> list[Entry]:
        """The buffered records to publish now, in order; the waiting ones stay (see :meth:`flush`)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last_flush = self._clock()
        if not self._remote_buffered:
            batch, self._buffer = self._buffer, []
            return batch
        batch, keep = split_ready(self._buffer, drop_waiting)
        self._buffer, self._waiting = keep, len(keep)
        self._remote_buffered = bool(keep)
        if keep:
            self._arm_timer()
        return batch

    def _send(self, records: list[dict[str, Any]]) -> None:
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
        self.flush(wait=REMOTE_WAIT)
        with self._lock:
            self._next_step = 0  # each cell is a new run (and a new chart): default steps restart


_REPORTER = ProcessWide(Reporter)


def reporter() -> Reporter:
    """The process-wide :class:`Reporter` (made on first use)."""
    return _REPORTER.get()


def report(step: Any = None, **metrics: Any) -> None:
    """Report metric values at ``step`` to the notebook's live dashboard.

    ``mw.report(step=i, loss=local_loss, global_loss=global_loss)``: name the value each worker
    computes on its own shard ``loss`` (one curve per worker) and a value reduced over all workers
    ``global_loss`` (one "global" curve). Values may be Python or numpy numbers, tensors or
    variables; inside a ``tf.function`` they are recorded when the step runs. ``step`` defaults
    to one more than the previous step (0 for the first report of a cell). Outside a kernel (a plain script)
    reporting does nothing.

    In a ``--ps`` cluster's coordinator, values may be what ``coordinator.schedule`` returned
    (``RemoteValue``s): ``mw.report(step=i, scheduled=result)`` for a step function that returns a
    dict such as ``{"loss": loss, "worker": experimental_get_current_worker_index()}``, or
    ``mw.report(step=i, worker=w, loss=rv)``. ``worker`` names the worker server that computed the
    values, whose curve they are drawn on. They are sent once their steps have run, never waited
    for in the loop; the cell's end waits for them (at most :data:`REMOTE_WAIT` seconds), and the
    records of aborted or failed steps are dropped with a log line (worker/_remote.py).
    """
    reporter().report(step, **metrics)


def flush() -> None:
    """Send buffered records now (normally not needed: the cell end flushes)."""
    reporter().flush()
