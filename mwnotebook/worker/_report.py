"""Worker side of live metrics: ``mw.report(step=..., **metrics)`` and ``mw.keras_callback()``.

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
value over all workers (see :mod:`mwnotebook.shared.metrics`).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from mwnotebook.shared.events import METRICS_MIME
from mwnotebook.shared.metrics import GLOBAL_PREFIX, encode_float

log = logging.getLogger(__name__)

#: Seconds between two flushes (so at most ~10 display_data messages per second per worker).
FLUSH_INTERVAL = 0.1
#: A flush is forced when this many records are buffered, whatever the interval.
MAX_BUFFER = 5000


class _Lazy:
    """A value computed from tensors at flush time (e.g. ``total / count``), not at report time."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., float], *args: Any) -> None:
        self.fn = fn
        self.args = args

    def resolve(self) -> float:
        return self.fn(*(_to_number(a) for a in self.args))


def _to_number(value: Any) -> Any:
    """A plain Python number from a float, numpy scalar, size-1 array or (eager) tensor."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, _Lazy):
        return value.resolve()
    if _kind(value) in (_EAGER, _VARIABLE):
        value = value.numpy()
    item = getattr(value, "item", None)  # numpy scalars and size-1 arrays
    if item is not None:
        try:
            return item()
        except ValueError as exc:
            raise ValueError(f"metric values must be scalars, got shape {value.shape}") from exc
    return float(value)


def _json_value(value: Any) -> Any:
    """JSON-safe number (or string) for a record; ``None`` with a warning when not convertible."""
    try:
        value = _to_number(value)
    except (TypeError, ValueError) as exc:  # a bad metric must not break the training loop
        log.warning("mwnotebook.worker.report: dropped a value that is not a number: %s", exc)
        return None
    if isinstance(value, float):
        return encode_float(value)
    return value


def _tf() -> Any:
    """TensorFlow if this process already imported it (report never imports it itself)."""
    return sys.modules.get("tensorflow")


_PLAIN, _EAGER, _VARIABLE, _GRAPH = "plain", "eager", "variable", "graph"
_KINDS: dict[type, str] = {bool: _PLAIN, int: _PLAIN, float: _PLAIN, type(None): _PLAIN}


def _kind(value: Any) -> str:
    """How a value must be handled, cached per type (``report`` runs every training step)."""
    cls = type(value)
    kind = _KINDS.get(cls)
    if kind is None:
        tf = _tf()
        if cls.__name__ == "EagerTensor":
            kind = _EAGER  # concrete already; converted at flush time
        elif tf is not None and isinstance(value, tf.Variable):
            kind = _VARIABLE  # may change before the flush: snapshot it
        elif tf is not None and isinstance(value, tf.Tensor):
            kind = _GRAPH  # a symbolic tensor: we are tracing a tf.function
        else:
            kind = _PLAIN  # numbers, numpy scalars, _Lazy, ...
        _KINDS[cls] = kind
    return kind


def _snapshot(value: Any) -> Any:
    """Freeze a variable's current value without a device sync (a tensor, read at flush time)."""
    return value.read_value() if _kind(value) == _VARIABLE else value


def _needs_graph(values: Any) -> bool:
    """True while tracing a tf.function: the values are symbolic and must go via py_function."""
    graph = False
    for value in values:
        kind = _kind(value)
        if kind == _GRAPH or (kind == _VARIABLE and _tf().inside_function()):
            graph = True
    return graph


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
        if _needs_graph((step, *metrics.values())):
            self._report_from_graph(step, metrics)
            return
        if self._hooked_shell is None:
            self._install_hook()
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
        self._install_hook()
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

    def _install_hook(self) -> None:
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


# ---------------------------------------------------------------------------------------------
# Keras


def _mean_of_parts(n: int, *parts: Any) -> float:
    """sum(totals) / sum(counts) for ``parts = totals + counts`` (``n`` of each)."""
    total = sum(float(p) for p in parts[:n])
    count = sum(float(p) for p in parts[n:])
    return total / count if count else math.nan


def _divide(value: Any, by: float) -> float:
    return float(value) / by


def _local_reduce_metric(strategy: Any, metric: Any) -> tuple[list[Any], list[Any]] | None:
    """This worker's own (total, count) components of a mean metric, without a collective."""
    total = getattr(metric, "total", None)
    count = getattr(metric, "count", None)
    if total is None or count is None or not hasattr(total, "read_value"):
        return None
    if strategy is not None:
        totals = strategy.experimental_local_results(total)
        counts = strategy.experimental_local_results(count)
    else:
        totals, counts = (total,), (count,)
    return [t.read_value() for t in totals], [c.read_value() for c in counts]


def _logs_are_summed(model: Any, strategy: Any) -> bool:
    """True when tf_keras summed batch-end logs over replicas (see :class:`_KerasReporter`)."""
    if strategy is None or getattr(strategy, "num_replicas_in_sync", 1) <= 1:
        return False
    module = type(model).__module__
    legacy = module.startswith(("tf_keras", "keras.src.engine", "keras.engine"))
    if not legacy:
        return False  # Keras 3 reports per-batch metrics already reduced correctly
    tf = _tf()
    try:
        tpu = tf is not None and isinstance(strategy, (tf.distribute.TPUStrategy,))
    except AttributeError:  # pragma: no cover
        tpu = False
    method = getattr(model, "distribute_reduction_method", None) or "auto"
    if method == "auto":
        method = "first" if tpu else "sum"
    return method == "sum"


def _keras_base() -> type:
    tf = _tf()
    if tf is None:
        import tensorflow as tf  # the user is calling model.fit, TF is there
    return tf.keras.callbacks.Callback


def keras_callback(*, every: int = 1, local: bool = True) -> Any:
    """A Keras callback that reports batch and epoch metrics of ``model.fit`` to the dashboard.

    Under ``MultiWorkerMirroredStrategy`` (tf_keras) the batch-end ``logs`` Keras hands to callbacks
    are the SUM over all replicas of each replica's running mean (measured with 2 workers: batch
    loss 1.57 while the epoch history says 0.787). This callback reports:

    * ``global_<name>``: the batch log divided by the number of replicas -- the running mean over
      all workers (exact when every replica gets the same batch size, which is the usual case);
      at epoch end, the epoch logs as Keras computed them (already correct);
    * ``<name>`` (when ``local=True``): this worker's own running mean, read from its local part of
      the metric's ``total``/``count`` variables (no collective, no extra device sync per batch).

    ``every``: report every n-th batch only.
    """
    base = _keras_base()

    class _KerasReporter(base):  # type: ignore[misc, valid-type]
        _supports_tf_logs = True  # keep logs as tensors: no per-batch device sync for us

        def __init__(self) -> None:
            super().__init__()
            self._every = max(1, int(every))
            self._local = local
            self._step = 0
            self._epoch = 0
            self._divisor = 1.0
            self._strategy: Any = None
            self._last_global: dict[str, _Lazy] = {}
            self._reporter = reporter()

        def on_train_begin(self, logs: Any = None) -> None:
            self._reporter._install_hook()
            self._strategy = getattr(self.model, "distribute_strategy", None)
            summed = _logs_are_summed(self.model, self._strategy)
            self._divisor = float(self._strategy.num_replicas_in_sync) if summed else 1.0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._epoch = epoch

        def _local_values(self, logs: Any, global_values: dict[str, Any]) -> dict[str, Any]:
            """This worker's own values of the metrics in ``logs`` (see keras_callback)."""
            values: dict[str, Any] = {}
            for metric in getattr(self.model, "metrics", []):
                if metric.name not in logs:
                    continue
                parts = _local_reduce_metric(self._strategy, metric)
                if parts is not None:
                    totals, counts = parts
                    values[metric.name] = _Lazy(_mean_of_parts, len(totals), *totals, *counts)
            replicas = getattr(self._strategy, "num_replicas_in_sync", 1)
            if not values and replicas == 1:
                # one replica (e.g. Keras 3 in one process): the local value is the global one
                values = {k[len(GLOBAL_PREFIX):]: v for k, v in global_values.items()}
            return values

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._step += 1
            if (self._step - 1) % self._every:
                return
            values: dict[str, Any] = {}
            for name, value in (logs or {}).items():
                values[GLOBAL_PREFIX + name] = _Lazy(_divide, value, self._divisor)
            self._last_global = dict(values)
            if self._local:
                values.update(self._local_values(logs or {}, self._last_global))
            self._reporter.add(self._step, values,
                               extra={"kind": "batch", "epoch": self._epoch, "batch": batch})

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            logs = logs or {}
            values: dict[str, Any] = {GLOBAL_PREFIX + k: v for k, v in logs.items()}
            if self._local:
                values.update(self._local_values(logs, values))
            self._check_divisor(logs)
            self._reporter.add(self._step, values, extra={"kind": "epoch", "epoch": epoch})

        def _check_divisor(self, logs: Any) -> None:
            """Warn when the last batch's corrected value disagrees with Keras' epoch value."""
            if self._every != 1 or "loss" not in logs or "global_loss" not in self._last_global:
                return
            try:
                batch_value = self._last_global["global_loss"].resolve()
                epoch_value = float(_to_number(logs["loss"]))
            except Exception:  # a sanity check must never break training
                return
            if math.isfinite(epoch_value) and abs(batch_value - epoch_value) > 1e-3 * max(1.0, abs(epoch_value)):
                log.warning("mwnotebook: batch-level global loss %.5f differs from Keras' epoch loss "
                            "%.5f; batch curves may be scaled wrongly for this Keras/strategy",
                            batch_value, epoch_value)

        def on_train_end(self, logs: Any = None) -> None:
            self._reporter.flush()

    return _KerasReporter()
