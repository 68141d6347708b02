"""One Keras on both sides: the notebook kernel uses the Keras the workers use.

Workers run tf_keras (``TF_USE_LEGACY_KERAS=1``, set by default when tf_keras is installed: Keras 3
``fit`` fails under MultiWorkerMirroredStrategy). A notebook on Keras 3 then cannot use what the
chief saves: ``tf.keras.models.load_model`` refuses the legacy SavedModel, and
``tf.train.Checkpoint(model=...).restore()`` restores none of the weights *without an error*
(measured; notebooks/07_official_tutorial_flows.ipynb loads what the chief saved).
TensorFlow picks its Keras when it loads, so the choice must be made before
the notebook imports TensorFlow: at ``%load_ext mwnotebook``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import MutableMapping
from typing import Any

ENV = "TF_USE_LEGACY_KERAS"
_FALSE = ("0", "false", "no", "")

SWITCHED = ("mwnotebook: this notebook uses tf_keras like the workers (TF_USE_LEGACY_KERAS=1), so the "
            "models they save load here; --no-legacy-keras keeps both on Keras 3.")
MISMATCH = ("mwnotebook: TensorFlow was imported in this notebook before %load_ext mwnotebook, with Keras 3, "
            "while the workers will use tf_keras. What the workers save will not load here: "
            "tf.keras.models.load_model() refuses their SavedModels, and tf.train.Checkpoint(model=...).restore() "
            "restores NO weights, without an error. Fix: restart the kernel and run %load_ext mwnotebook before "
            "importing tensorflow (or run %%mwtrain with --no-legacy-keras to keep both on Keras 3).")
MISMATCH_NO_LEGACY = ("mwnotebook: --no-legacy-keras puts the workers on Keras 3, but this notebook already "
                      "imported TensorFlow with tf_keras: what the workers save may not load here. Restart the "
                      "kernel and run %%mwtrain with --no-legacy-keras before importing tensorflow.")


def _tf_keras_installed() -> bool:
    return importlib.util.find_spec("tf_keras") is not None


def _legacy(environ: MutableMapping[str, str]) -> bool:
    return environ.get(ENV, "").strip().lower() not in _FALSE


class KerasChoice:
    """Decides, once per notebook session, which Keras the notebook uses, and says so in one line."""

    def __init__(self, environ: MutableMapping[str, str] | None = None, modules: dict[str, Any] | None = None,
                 tf_keras_installed: bool | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.modules = sys.modules if modules is None else modules
        self.installed = _tf_keras_installed() if tf_keras_installed is None else tf_keras_installed
        self.switched_by_us = False
        self._warned_no_legacy = False

    def on_load(self) -> str | None:
        """At ``%load_ext``: the one line to show (None: nothing to say)."""
        if not self.installed:
            return None
        if ENV in self.environ and not _legacy(self.environ):
            return None  # the user chose Keras 3 for this notebook on purpose
        if "tensorflow" not in self.modules:
            if not _legacy(self.environ):
                self.environ[ENV] = "1"
                self.switched_by_us = True
                return SWITCHED
            return None
        return None if _legacy(self.environ) else MISMATCH

    def on_cell(self, workers_use_legacy: bool) -> str | None:
        """Before a cell: follow ``--no-legacy-keras`` where still possible, else say what breaks."""
        if workers_use_legacy or not self.installed:
            return None
        if "tensorflow" not in self.modules:
            if self.switched_by_us:
                self.environ.pop(ENV, None)
                self.switched_by_us = False
            return None
        if _legacy(self.environ) and not self._warned_no_legacy:
            self._warned_no_legacy = True
            return MISMATCH_NO_LEGACY
        return None
