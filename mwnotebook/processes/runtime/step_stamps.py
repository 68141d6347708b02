"""Stamps inside a tf_keras training step, so each worker can say how long it took to reach the
gradient all-reduce and how long it waited there (``mwnotebook/worker/_step_clock.py``,
``mwnotebook/shared/step_times.py``).

Two ``tf.py_function`` ops per step (no inputs: ordered by control dependencies, so no tensor is
handed to Python), only under MultiWorkerMirroredStrategy with more than one replica: one in ``Model.train_step`` that
runs once the batch is there (after the batch's first tensor), one in
``tf_keras.src.optimizers.utils.all_reduce_sum_gradients`` (the all-reduce of both the new and the
legacy optimizers) that runs once every dense gradient is computed, the all-reduce made to wait for
it. A ``train_step`` of the user's own gets the second only (no input figure then). Decided when
``fit`` traces its step: ``--env MWNOTEBOOK_STEP_TIMES=0`` (or the automatic Keras callback off)
traces the step without them. Cost: benchmarks/step_times.py.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from mwnotebook.processes.runtime import keras_global_logs

SWITCH_ENV = "MWNOTEBOOK_STEP_TIMES"
OPTIMIZER_UTILS = "tf_keras.src.optimizers.utils"


def enabled() -> bool:
    return (os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "false", "no")
            and keras_global_logs.enabled())


def _distributed(tf: Any) -> bool:
    """Under MultiWorkerMirroredStrategy with more than one replica: the synchronous multi-worker
    training where a slow worker holds the others (not parameter servers, whose steps run as
    closures on worker servers where no Python of ours is; not a TPU, where no py_function runs)."""
    if not tf.distribute.has_strategy():
        return False
    strategy = tf.distribute.get_strategy()
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and int(getattr(strategy, "num_replicas_in_sync", 1)) > 1)


def _in_xla(tf: Any) -> bool:
    """True while tracing for XLA (``jit_compile=True``), where a ``py_function`` cannot run."""
    try:
        from tensorflow.python.ops import control_flow_util

        return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
    except Exception:  # an internal helper that moved: stamp nothing rather than break fit
        return True


def _clock() -> Any:
    from mwnotebook.worker._step_clock import step_clock

    return step_clock()


def _stamped_train_step(original: Callable[..., Any], tf: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def train_step(self: Any, data: Any) -> Any:
        if enabled() and _distributed(tf) and not _in_xla(tf):
            first = next((t for t in tf.nest.flatten(data) if isinstance(t, tf.Tensor)), None)
            if first is not None:  # after the batch (a control input: no tensor handed to Python)
                with tf.control_dependencies([first]):
                    tf.py_function(_clock().input_ready, [], Tout=tf.float64, name="mwnotebook_input_ready")
        return original(self, data)

    train_step.mwnotebook_stamped = True  # type: ignore[attr-defined]
    return train_step


def _stamped_all_reduce(original: Callable[..., Any], tf: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def all_reduce_sum_gradients(grads_and_vars: Any) -> Any:
        pairs = list(grads_and_vars)
        dense = [g for g, _ in pairs if isinstance(g, tf.Tensor)]
        if not dense or not enabled() or not _distributed(tf) or _in_xla(tf):
            return original(pairs)
        with tf.control_dependencies(dense):  # once every gradient is there (none handed to Python)
            stamp = tf.py_function(_clock().at_collective, [], Tout=tf.float64, name="mwnotebook_at_collective")
        with tf.control_dependencies([stamp]):
            pairs = [(tf.identity(g) if isinstance(g, tf.Tensor) else g, v) for g, v in pairs]
        return original(pairs)

    all_reduce_sum_gradients.mwnotebook_stamped = True  # type: ignore[attr-defined]
    return all_reduce_sum_gradients


def patch_training_module(training: ModuleType) -> None:
    """Stamp the batch's arrival in ``Model.train_step`` (idempotent)."""
    model = training.Model
    if not getattr(model.train_step, "mwnotebook_stamped", False):
        model.train_step = _stamped_train_step(model.train_step, training.tf)


def patch_optimizer_utils(utils: ModuleType) -> None:
    """Stamp the arrival at the gradient all-reduce (idempotent)."""
    reduce = utils.all_reduce_sum_gradients
    if not getattr(reduce, "mwnotebook_stamped", False):
        utils.all_reduce_sum_gradients = _stamped_all_reduce(reduce, utils.tf)  # type: ignore[attr-defined]
