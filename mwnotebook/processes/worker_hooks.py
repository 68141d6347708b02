"""Import hooks a worker kernel installs at start, so unmodified notebook code behaves in a worker
as it does in a plain kernel. Nothing is imported early: each hook acts when the user's code first
imports the module it concerns (or at once in a worker forked from a template that preloaded it).

- ``tf_keras`` ``Model.fit`` gets :func:`mwnotebook.worker.keras_callback` added (unless the call
  already has one), so a plain ``model.fit`` draws per-worker and global curves in the notebook.
- ``tf_keras`` callbacks, the ``verbose=1`` progress bar included, get each metric's global value
  per batch instead of N times it (:mod:`mwnotebook.processes.runtime.keras_global_logs`).
- Both are off with ``mw.auto_keras_callback(False)`` in a cell or
  ``--env MWNOTEBOOK_AUTO_KERAS_CALLBACK=0`` (the switch is that environment variable, read at every
  ``fit``).
- tf_keras' training step stamps when its batch is there and when it reaches the gradient
  all-reduce, for the slow-worker verdict (:mod:`mwnotebook.processes.runtime.step_stamps`).
- ``tqdm.notebook`` (and so ``tqdm.auto``) gives the text bar: a worker's ipywidgets progress bar
  would exist only in the worker (the notebook would show a frozen ``0%``); the text bar arrives
  as ``\\r`` lines that the notebook draws as one live line per worker.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from mwnotebook.processes.runtime import keras_global_logs, step_stamps
from mwnotebook.processes.runtime.after_import import patch_when_imported

AUTO_CALLBACK_ENV = keras_global_logs.SWITCH_ENV
TRAINING_MODULE = keras_global_logs.TRAINING_MODULE


def _is_ours(callback: Any) -> bool:
    return type(callback).__name__ == "_KerasReporter" and type(callback).__module__.startswith("mwnotebook.")


def _with_live_curves(fit: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fit)
    def fit_with_live_curves(self: Any, *args: Any, **kwargs: Any) -> Any:
        if keras_global_logs.enabled() and len(args) < 6 and not getattr(self, "_mwnotebook_in_fit", False):
            callbacks = kwargs.get("callbacks")
            listed = list(callbacks) if isinstance(callbacks, (list, tuple)) else None
            if callbacks is None or listed is not None:
                listed = listed or []
                if not any(_is_ours(cb) for cb in listed):
                    from mwnotebook.worker import keras_callback

                    kwargs["callbacks"] = [*listed, keras_callback()]
        self._mwnotebook_in_fit = True  # a subclass's fit calling super().fit: one callback
        try:
            return fit(self, *args, **kwargs)
        finally:
            self._mwnotebook_in_fit = False

    fit_with_live_curves.mwnotebook_wrapped = True  # type: ignore[attr-defined]
    return fit_with_live_curves


def _patch_fit_with_live_curves(training: ModuleType) -> None:
    model = training.Model
    if not getattr(model.fit, "mwnotebook_wrapped", False):
        model.fit = _with_live_curves(model.fit)


def _patch_tqdm_notebook(module: ModuleType) -> None:
    from tqdm.std import tqdm, trange

    module.tqdm = module.tqdm_notebook = tqdm  # type: ignore[attr-defined]
    module.trange = module.tnrange = trange  # type: ignore[attr-defined]


def install() -> None:
    """Add the hooks (called once by the worker kernel's entry point, before ipykernel starts)."""
    patch_when_imported(TRAINING_MODULE, keras_global_logs.patch_training_module)
    patch_when_imported(TRAINING_MODULE, _patch_fit_with_live_curves)
    patch_when_imported(TRAINING_MODULE, step_stamps.patch_training_module)
    patch_when_imported(step_stamps.OPTIMIZER_UTILS, step_stamps.patch_optimizer_utils)
    patch_when_imported("tqdm.notebook", _patch_tqdm_notebook)
