"""Import hooks a worker kernel installs at start, so unmodified notebook code behaves in a worker
as it does in a plain kernel. Nothing is imported early: each hook acts when the user's code first
imports the module it concerns.

- ``tf_keras`` ``Model.fit`` gets :func:`mwnotebook.worker.keras_callback` added (unless the call
  already has one), so a plain ``model.fit`` draws per-worker and global curves in the notebook.
  Off with ``mw.auto_keras_callback(False)`` in a cell or ``--env MWNOTEBOOK_AUTO_KERAS_CALLBACK=0``
  (the switch is that environment variable, read at every ``fit``).
- ``tqdm.notebook`` (and so ``tqdm.auto``) gives the text bar: a worker's ipywidgets progress bar
  would exist only in the worker (the notebook would show a frozen ``0%``); the text bar arrives
  as ``\\r`` lines that the notebook draws as one live line per worker.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

AUTO_CALLBACK_ENV = "MWNOTEBOOK_AUTO_KERAS_CALLBACK"


def _auto_callback() -> bool:
    return os.environ.get(AUTO_CALLBACK_ENV, "1").strip().lower() not in ("0", "false", "no")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``patch(module)`` right after ``name`` is first imported."""

    def __init__(self, name: str, patch: Callable[[Any], None]) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            load(module)
            try:
                self.patch(module)
            except Exception:
                pass

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _is_ours(callback: Any) -> bool:
    return type(callback).__name__ == "_KerasReporter" and type(callback).__module__.startswith("mwnotebook.")


def _with_live_curves(fit: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fit)
    def fit_with_live_curves(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _auto_callback() and len(args) < 6 and not getattr(self, "_mwnotebook_in_fit", False):
            callbacks = kwargs.get("callbacks")
            listed = list(callbacks) if isinstance(callbacks, (list, tuple)) else None
            if callbacks is None or listed is not None:
                listed = listed or []
                if not any(_is_ours(cb) for cb in listed):
                    from mwnotebook.worker._report import keras_callback

                    kwargs["callbacks"] = [*listed, keras_callback()]
        self._mwnotebook_in_fit = True  # a subclass's fit calling super().fit: one callback
        try:
            return fit(self, *args, **kwargs)
        finally:
            self._mwnotebook_in_fit = False

    fit_with_live_curves._mwnotebook_wrapped = True  # type: ignore[attr-defined]
    return fit_with_live_curves


def _patch_tf_keras_training(module: Any) -> None:
    model = module.Model
    if not getattr(model.fit, "_mwnotebook_wrapped", False):
        model.fit = _with_live_curves(model.fit)


def _patch_tqdm_notebook(module: Any) -> None:
    from tqdm.std import tqdm, trange

    module.tqdm = module.tqdm_notebook = tqdm
    module.trange = module.tnrange = trange


def _patch_when_imported(name: str, patch: Callable[[Any], None]) -> None:
    """Patch ``name`` now if it is loaded already (a worker forked from a template that imported
    tf_keras), else right after its first import."""
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
    else:
        sys.meta_path.insert(0, _AfterImport(name, patch))


def install() -> None:
    """Add the hooks (called once by the worker kernel's entry point, before ipykernel starts)."""
    _patch_when_imported("tf_keras.src.engine.training", _patch_tf_keras_training)
    _patch_when_imported("tqdm.notebook", _patch_tqdm_notebook)
