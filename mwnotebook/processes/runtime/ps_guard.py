"""A stock ``MultiWorkerMirroredStrategy()`` in a ``%%mwtrain --ps`` cluster's coordinator gets a
message that says which strategy the cluster is for; a second ``ParameterServerStrategy`` in the same
coordinator (a stock tutorial cell run again) is refused with one that says why.

Why refuse the second: the first one connected this process to the cluster. Connecting again keeps
the old gRPC server listening, invalidates the old variables, and touching the old coordinator
afterwards crashed the whole process in our measurements: in a notebook that is the user's kernel.
``mw.ps_strategy()`` returns the first strategy on every run instead.

tf_keras ``fit``/``evaluate``/``predict`` with ``verbose=1`` under ``ParameterServerStrategy`` raise
tf_keras's own ValueError ("not allowed ... for performance reasons": a bar updated every step would
fetch every step's result from the workers). tf_keras itself shows one line per epoch
(``verbose=2``) for its default ``verbose="auto"`` under this strategy, and the parameter-server
tutorial's ``fit`` passes no ``verbose``; so an explicit ``verbose=1`` (a cell brought over from
all-reduce training) gets that same per-epoch line and a warning that says so, instead of an error.

Without it the strategy would look for its peer replicas among the cluster's worker *servers*,
which never start the collective the strategy waits for: the cell would hang, or fail with a
TensorFlow error that does not mention the cause. The check is made when the strategy is built
(``TF_CONFIG`` names ``ps`` tasks), so a plain cluster is never affected.
"""

from __future__ import annotations

import json
import os
import warnings
from types import ModuleType
from typing import Any

from mwnotebook.processes.runtime.after_import import marked, patch_when_imported, stacked_on
from mwnotebook.processes.runtime.collective_keys import TARGET_MODULE

MESSAGE = ("this is a parameter-server cluster (%%mwtrain --ps): it is for ParameterServerStrategy, "
           "not MultiWorkerMirroredStrategy. Use strategy = mw.ps_strategy() (or "
           "tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())) "
           "and mw.coordinator(); for MultiWorkerMirroredStrategy start the cluster without --ps.")


class WrongStrategyForCluster(RuntimeError):
    """MultiWorkerMirroredStrategy built in a parameter-server cluster."""


def in_ps_cluster() -> bool:
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "") or "{}").get("cluster") or {}
    except (ValueError, AttributeError):
        return False
    return isinstance(cluster, dict) and bool(cluster.get("ps"))


def patch_strategy_classes(module: ModuleType) -> None:
    for name in ("CollectiveAllReduceStrategy", "CollectiveAllReduceStrategyV1"):
        cls = getattr(module, name, None)
        if cls is None or marked(cls.__init__, "mw_ps_guard"):
            continue
        original = cls.__init__

        def __init__(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> None:
            if in_ps_cluster():
                raise WrongStrategyForCluster(MESSAGE)
            __original(self, *args, **kwargs)

        cls.__init__ = stacked_on(original, __init__, "mw_ps_guard")


PS_MODULE = "tensorflow.python.distribute.parameter_server_strategy_v2"

AGAIN = ("this kernel already made a ParameterServerStrategy: a process can connect to its cluster only "
         "once (a second connection leaves the first one's server and variables behind, and can crash "
         "the kernel). Use strategy = mw.ps_strategy() and mw.coordinator(), which return the same "
         "objects on every run, or %mwcluster restart for a fresh coordinator.")

_made = 0


def strategies_made() -> int:
    """ParameterServerStrategy objects made in this process since :func:`install` (or the last forget)."""
    return _made


def forget_strategies() -> None:
    """Let one more strategy be made (a notebook forced onto a second cluster: engine/roles/notebook_coordinator.py)."""
    global _made
    _made = 0


class SecondParameterServerStrategy(RuntimeError):
    """A second ParameterServerStrategy in one coordinator process."""


def patch_ps_strategy(module: ModuleType) -> None:
    cls = getattr(module, "ParameterServerStrategyV2", None)
    if cls is None or marked(cls.__init__, "mw_ps_guard"):
        return
    original = cls.__init__

    def __init__(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> None:
        global _made
        if _made:
            raise SecondParameterServerStrategy(AGAIN)
        __original(self, *args, **kwargs)
        _made += 1

    cls.__init__ = stacked_on(original, __init__, "mw_ps_guard")


KERAS_TRAINING = "tf_keras.src.engine.training"

VERBOSE_NOTE = ("mwnotebook: verbose=1 (a progress bar updated every step) is not available under "
                "ParameterServerStrategy: it would fetch every step's result from the workers, so tf_keras "
                "refuses it. Showing one line per epoch (verbose=2, what tf_keras picks for this strategy "
                "by default) instead; pass verbose=2, verbose=0, or no verbose, to silence this note.")


class ProgressBarUnderParameterServer(UserWarning):
    """verbose=1 was asked for under ParameterServerStrategy and became verbose=2."""


def patch_keras_verbosity(module: ModuleType) -> None:
    """Wrap tf_keras's ``_get_verbosity`` (fit, evaluate and predict call it through the module's
    globals first thing): ``verbose=1`` under a strategy that runs with a coordinator becomes 2."""
    original = getattr(module, "_get_verbosity", None)
    if original is None or marked(original, "mw_ps_verbose"):
        return

    def _get_verbosity(verbose: Any, distribute_strategy: Any, __original: Any = original) -> Any:
        if verbose == 1 and getattr(distribute_strategy, "_should_use_with_coordinator", False):
            warnings.warn(VERBOSE_NOTE, ProgressBarUnderParameterServer, stacklevel=2)
            verbose = 2
        return __original(verbose, distribute_strategy)

    module._get_verbosity = stacked_on(original, _get_verbosity, "mw_ps_verbose")  # type: ignore[attr-defined]  # noqa: SLF001 - the hook, see above


def install() -> None:
    patch_when_imported(TARGET_MODULE, patch_strategy_classes)
    patch_when_imported(PS_MODULE, patch_ps_strategy)
    patch_when_imported(KERAS_TRAINING, patch_keras_verbosity)
