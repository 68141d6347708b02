"""``mw.keras_callback()``: a Keras callback that sends ``model.fit``'s metrics to the live chart.

Added to every ``model.fit`` in a worker by itself (``processes/worker_hooks.py``) unless
the call has one or the switch is off.
"""

from __future__ import annotations

import functools
import importlib
import logging
import math
from typing import Any

from mwnotebook.shared.metrics import GLOBAL_PREFIX
from mwnotebook.worker._report import reporter
from mwnotebook.worker._step_clock import step_clock
from mwnotebook.worker._values import _Lazy, _tf, _to_number

log = logging.getLogger(__name__)

#: Set on a model whose tf_keras step functions already give global metric values per batch
#: (by the worker's hook, mwnotebook/processes/runtime/keras_global_logs.py).
GLOBAL_LOGS_ATTR = "mwnotebook_global_logs"


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
    """True when tf_keras summed batch-end logs over replicas (see :func:`keras_callback`)."""
    if strategy is None or getattr(strategy, "num_replicas_in_sync", 1) <= 1:
        return False
    if getattr(model, GLOBAL_LOGS_ATTR, False):
        return False  # the worker's hook made them global already
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


#: With a learning-rate schedule, its value is reported every this many batches (one small eager
#: op each, at flush time, not in the step).
LR_EVERY = 10


def _lr_schedule(optimizer: Any) -> Any:
    """The optimizer's ``LearningRateSchedule`` (tf_keras keeps it as ``_learning_rate`` or as the
    ``learning_rate`` hyperparameter), or None for a constant rate."""
    tf = _tf()
    if optimizer is None or tf is None:
        return None
    base = tf.keras.optimizers.schedules.LearningRateSchedule
    candidates = [getattr(optimizer, "_learning_rate", None)]
    get_hyper = getattr(optimizer, "_get_hyper", None)
    if get_hyper is not None:
        try:
            candidates.append(get_hyper("learning_rate"))
        except (KeyError, AttributeError, ValueError):
            pass
    return next((c for c in candidates if isinstance(c, base)), None)


def _schedule_value(schedule: Any, step: Any) -> float:
    return float(schedule(step))


def _keras_base() -> type:
    tf = _tf()
    if tf is None:  # the user is calling model.fit, TF is there
        tf = importlib.import_module("tensorflow")
    base: type = tf.keras.callbacks.Callback
    return base


def keras_callback(*, every: int = 1, local: bool = True) -> Any:
    """A Keras callback that reports batch and epoch metrics of ``model.fit`` to the dashboard.

    Under ``MultiWorkerMirroredStrategy`` (tf_keras), a worker's hook makes the batch-end ``logs``
    every callback gets the global value of each metric (see
    ``mwnotebook/processes/runtime/keras_global_logs.py``). With that hook off
    (``mw.auto_keras_callback(False)``) they are N times the global value -- each replica already
    holds the global value and Keras sums them -- so this callback divides them by N. It reports:

    * ``global_<name>``: the global running value per batch; at epoch end, the epoch logs as Keras
      computed them;
    * ``<name>`` (when ``local=True``): this worker's own running mean, read from its local part of
      the metric's ``total``/``count`` variables (no collective, no extra device sync per batch).

    ``every``: report every n-th batch only.
    """
    base = _keras_base()
    from mwnotebook.worker._ps import ps_task_count

    if ps_task_count():
        return _epoch_reporter(base)

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
            self._schedule: Any = None
            self._clock = step_clock()

        def on_train_begin(self, logs: Any = None) -> None:
            self._reporter.install_hook()
            self._schedule = _lr_schedule(getattr(self.model, "optimizer", None))
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

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self._clock.begin_step()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            split = self._clock.end_step()  # first: the step's end (shared/step_times.py)
            steps = (self.params or {}).get("steps")
            if isinstance(steps, int) and steps > 0:
                # Counted from the epoch: a fit resumed by BackupAndRestore at epoch e continues the
                # x-axis at e * steps instead of starting again at 1 (same numbers otherwise).
                self._step = self._epoch * steps + batch + 1
            else:
                self._step += 1
            if (self._step - 1) % self._every:
                return
            values: dict[str, Any] = {}
            for name, value in (logs or {}).items():
                values[GLOBAL_PREFIX + name] = _Lazy(_divide, value, self._divisor)
            self._last_global = dict(values)
            if self._schedule is not None and (self._step - 1) % LR_EVERY == 0:
                values[GLOBAL_PREFIX + "lr"] = _Lazy(functools.partial(_schedule_value, self._schedule),
                                                        self._step - 1)
            if self._local:
                values.update(self._local_values(logs or {}, self._last_global))
            self._reporter.add(self._step, values,
                               extra={"kind": "batch", "epoch": self._epoch, "batch": batch, **split})

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


def _epoch_reporter(base: type) -> Any:
    """The reporter of a ``--ps`` cluster's coordinator: epoch metrics only.

    Under ``ParameterServerStrategy`` batch logs are ``RemoteValue``s of steps still running on the
    worker servers, and tf_keras refuses any callback with batch hooks; epoch-end logs are numbers.
    """

    class _KerasReporter(base):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self._reporter = reporter()

        def on_train_begin(self, logs: Any = None) -> None:
            self._reporter.install_hook()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            steps = int((self.params or {}).get("steps") or 1)
            values: dict[str, Any] = {GLOBAL_PREFIX + k: v for k, v in (logs or {}).items()}
            self._reporter.add((epoch + 1) * steps, values, extra={"kind": "epoch", "epoch": epoch})

        def on_train_end(self, logs: Any = None) -> None:
            self._reporter.flush()

    return _KerasReporter()
