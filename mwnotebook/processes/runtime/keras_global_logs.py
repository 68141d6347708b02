"""Keras callbacks (the progress bar too) see each metric's global value, not N times it.

Measured (tf_keras 2.21, MultiWorkerMirroredStrategy, 2 workers; tests/tf/test_keras_global_logs.py): every metric a
tf_keras ``train_step``/``test_step`` returns is already the global value on each replica -- the
metrics' ``result()`` is wrapped in a ``merge_call`` that aggregates their state over all replicas
(``tf_keras/src/utils/metrics_utils.py: result_wrapper``). ``fit``'s default reduction of the step's
outputs ("auto", which means "sum" on anything but a TPU) then adds those identical values once more
across the replicas, so the logs every callback gets per batch (``ProgbarLogger``'s bar, user
callbacks, ``on_test_batch_end`` during validation and ``evaluate``) and what ``train_on_batch`` /
``test_on_batch`` return are exactly ``num_replicas_in_sync`` times the true value -- for every kind
of metric (means, accuracy, loss with regularisation, ratios such as precision, sums, custom
``Metric`` subclasses), whatever the per-replica batch sizes and ``steps_per_execution``. Epoch-end
logs, ``History`` and ``evaluate``'s result are right: Keras re-reads the metrics there.

So dividing by N is not the fix (it is exact here only because every replica holds the same value;
it would be wrong for a non-metric output). Instead, for outputs that are the model's metrics, the
reduction takes the first replica's value -- what tf_keras does on a TPU, where it knows the values
are already reduced. That is exact and removes one collective per metric and step. Outputs that
are not a metric of the model (a custom ``train_step`` returning its own tensors) keep Keras'
reduction: a loss scaled by ``compute_loss`` for distribution is right summed; an unscaled one can't
be told apart. A reduction method set by the user (``model.distribute_reduction_method``) is kept.

Applies while ``fit``, ``evaluate``, ``train_on_batch`` or ``test_on_batch`` traces its function, and
follows the switch of the automatic Keras callback (``MWNOTEBOOK_AUTO_KERAS_CALLBACK``, read at every
call; a model's functions traced the other way are rebuilt). The switch must be the same on every
worker: the two ways run different numbers of collectives.
"""

from __future__ import annotations

import contextvars
import functools
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: The switch shared with the automatic Keras callback (``mw.auto_keras_callback(False)`` sets it to 0).
SWITCH_ENV = "MWNOTEBOOK_AUTO_KERAS_CALLBACK"
#: Set on a model whose step functions give global metric values (read by ``mw.keras_callback``).
GLOBAL_LOGS_ATTR = "mwnotebook_global_logs"
TRAINING_MODULE = "tf_keras.src.engine.training"
ENTRY_POINTS = ("fit", "evaluate", "train_on_batch", "test_on_batch")

_tracing_model: contextvars.ContextVar[Any] = contextvars.ContextVar("mwnotebook_keras_model", default=None)


def enabled() -> bool:
    """The switch, as ``mw.auto_keras_callback`` and ``--env`` set it (on by default)."""
    return os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "false", "no")


def _metric_names(model: Any) -> set[str]:
    return {metric.name for metric in getattr(model, "metrics", [])}


def _first_replica_for_metrics(original: Callable[..., Any], training: ModuleType) -> Callable[..., Any]:
    """``reduce_per_replica`` that takes the first replica's value for the model's metrics."""

    def reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
        model = _tracing_model.get()
        if (model is None or reduction != "auto" or not isinstance(values, dict)
                or getattr(model, "_cluster_coordinator", None) is not None  # parameter servers
                or getattr(strategy, "num_replicas_in_sync", 1) <= 1
                or training.backend.is_tpu_strategy(strategy)):
            return original(values, strategy, reduction)
        names = _metric_names(model)
        metrics = {k: v for k, v in values.items() if k in names}
        others = {k: v for k, v in values.items() if k not in names}
        reduced = dict(original(metrics, strategy, "first")) if metrics else {}
        if others:
            reduced.update(original(others, strategy, reduction))
        return {k: reduced[k] for k in values}

    reduce_per_replica.__wrapped__ = original  # type: ignore[attr-defined]
    reduce_per_replica.__doc__ = original.__doc__
    # plain Python over the step's outputs at trace time: nothing for AutoGraph to convert
    patched: Callable[..., Any] = training.tf.autograph.experimental.do_not_convert(reduce_per_replica)
    patched.mwnotebook_first_for_metrics = True  # type: ignore[attr-defined]
    return patched


def _traced_with_global_logs(method: Callable[..., Any]) -> Callable[..., Any]:
    """An entry point whose step functions are traced with (or, switch off, without) the fix."""

    @functools.wraps(method)
    def with_global_logs(self: Any, *args: Any, **kwargs: Any) -> Any:
        on = enabled()
        if getattr(self, GLOBAL_LOGS_ATTR, on) != on:
            self.train_function = None  # traced the other way: trace again
            self.test_function = None
        setattr(self, GLOBAL_LOGS_ATTR, on)
        token = _tracing_model.set(self if on else None)
        try:
            return method(self, *args, **kwargs)
        finally:
            _tracing_model.reset(token)

    with_global_logs.mwnotebook_global_logs = True  # type: ignore[attr-defined]
    return with_global_logs


def patch_training_module(training: ModuleType) -> None:
    """Install the fix into ``tf_keras.src.engine.training`` (idempotent)."""
    reduce = training.reduce_per_replica
    if not getattr(reduce, "mwnotebook_first_for_metrics", False):
        training.reduce_per_replica = _first_replica_for_metrics(reduce, training)  # type: ignore[attr-defined]
    model = training.Model
    for name in ENTRY_POINTS:
        method = getattr(model, name)
        if not getattr(method, "mwnotebook_global_logs", False):
            setattr(model, name, _traced_with_global_logs(method))
