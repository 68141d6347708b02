"""What cell code running inside a worker imports: ``import mwnotebook.worker as mw``.

- ``mw.report(step=..., **metrics)`` and ``mw.keras_callback()`` send metrics to the notebook's live chart
  (``model.fit`` adds the callback by itself; ``mw.auto_keras_callback(False)`` turns that off).
- ``mw.task_type()``, ``mw.task_index()``, ``mw.is_chief()`` and ``mw.save_path(path)`` say which
  TensorFlow task this kernel is and where it saves (``--chief`` makes replica 0 the chief).
- ``mw.ps_strategy()`` and ``mw.coordinator()`` (in a ``--ps`` cluster's coordinator kernel): the one
  ParameterServerStrategy and ClusterCoordinator of the process; ``mw.report(step=i,
  scheduled=coordinator.schedule(...))`` draws a custom loop's steps on the curve of the worker
  server that ran each (the step function returns ``{"loss": ..., "worker": ...}``).
- ``mw.sidecar_evaluate(model, data, checkpoint_dir, ...)`` (in a ``--evaluator`` kernel): evaluate
  each new checkpoint while training goes on, metrics as ``val_*`` curves.
- ``mw.strategy()`` creates the process's one MultiWorkerMirroredStrategy the right way;
  ``mw.num_replicas()`` and ``mw.global_batch(per_replica)`` size the batch from it.

Nothing here imports TensorFlow until it is needed.
"""

from __future__ import annotations

from mwnotebook.worker._evaluator import sidecar_evaluate
from mwnotebook.worker._keras import keras_callback
from mwnotebook.worker._ps import NotAParameterServerCluster, coordinator, ps_strategy
from mwnotebook.worker._report import flush, report
from mwnotebook.worker._roles import is_chief, save_path, task_index, task_type
from mwnotebook.worker._strategy import StrategyError, global_batch, num_replicas, strategy, visible_devices

__all__ = ["NotAParameterServerCluster", "StrategyError", "auto_keras_callback", "coordinator", "flush",
           "global_batch", "is_chief", "keras_callback", "num_replicas", "ps_strategy", "report", "save_path",
           "sidecar_evaluate", "strategy", "task_index", "task_type", "visible_devices"]


def auto_keras_callback(enabled: bool = True) -> None:
    """Turn on or off the live-curve callback every ``model.fit`` in this worker gets by itself."""
    import os

    os.environ["MWNOTEBOOK_AUTO_KERAS_CALLBACK"] = "1" if enabled else "0"
