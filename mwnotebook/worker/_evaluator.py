"""Worker side, in a ``--evaluator`` kernel: evaluate each new checkpoint while training goes on.

The evaluator kernel runs the same cell as the training kernels (its ``TF_CONFIG`` task is
``evaluator``, and it is never listed in the training cluster: a coordinator that finds an
evaluator there waits for it forever). The cell branches on ``mw.task_type() == "evaluator"`` and
calls :func:`sidecar_evaluate`, which runs tf_keras' ``SidecarEvaluator`` on the checkpoint
directory the training side writes and sends each evaluation's metrics to the live chart as
``val_<name>`` at the checkpoint's training step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mwnotebook.worker._report import flush, reporter


def sidecar_evaluate(model: Any, data: Any, checkpoint_dir: str, *, steps: int | None = None,
                     max_evaluations: int | None = None, callbacks: Sequence[Any] = ()) -> None:
    """Evaluate ``model`` on ``data`` for every checkpoint that appears in ``checkpoint_dir``.

    Returns after the checkpoint numbered ``max_evaluations`` (e.g. ``ckpt-{epoch}`` files and
    ``max_evaluations=epochs``: after the last epoch's). The model must be compiled with the
    metrics to report. Checkpoints: ``tf.keras.callbacks.ModelCheckpoint(dir + "/ckpt-{epoch}",
    save_weights_only=True)`` or a ``tf.train.CheckpointManager`` of ``Checkpoint(model=...,
    optimizer=...)``.
    """
    import tensorflow as tf

    sink = reporter()

    class _Report(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_test_end(self, logs: Any = None) -> None:
            optimizer = getattr(model, "optimizer", None)
            step = int(optimizer.iterations.numpy()) if optimizer is not None else None
            values = {f"val_{k}": float(v) for k, v in (logs or {}).items()}
            sink.add(step, values, extra={"kind": "epoch"})
            flush()

    tf.keras.utils.SidecarEvaluator(model, data, checkpoint_dir, steps=steps, max_evaluations=max_evaluations,
                                    callbacks=[_Report(), *callbacks]).start()
