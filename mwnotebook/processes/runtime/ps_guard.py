"""A stock ``MultiWorkerMirroredStrategy()`` in a ``%%mwtrain --ps`` cluster's coordinator gets a
message that says which strategy the cluster is for; a second ``ParameterServerStrategy`` in the same
coordinator (a stock tutorial cell run again) is refused with one that says why.

Why refuse the second: the first one connected this process to the cluster. Connecting again keeps
the old gRPC server listening, invalidates the old variables, and touching the old coordinator
afterwards crashed the whole process in our measurements: in a notebook that is the user's kernel.
``mw.ps_strategy()`` returns the first strategy on every run instead.

Without it the strategy would look for its peer replicas among the cluster's worker *servers*,
which never start the collective the strategy waits for: the cell would hang, or fail with a
TensorFlow error that does not mention the cause. The check is made when the strategy is built
(``TF_CONFIG`` names ``ps`` tasks), so a plain cluster is never affected.
"""

from __future__ import annotations

import json
import os
from types import ModuleType
from typing import Any

from mwnotebook.processes.runtime.after_import import marked, patch_when_imported
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

        __init__.mw_ps_guard = True  # type: ignore[attr-defined]
        __init__.__doc__ = original.__doc__
        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        cls.__init__ = __init__


PS_MODULE = "tensorflow.python.distribute.parameter_server_strategy_v2"

AGAIN = ("this kernel already made a ParameterServerStrategy: a process can connect to its cluster only "
         "once (a second connection leaves the first one's server and variables behind, and can crash "
         "the kernel). Use strategy = mw.ps_strategy() and mw.coordinator(), which return the same "
         "objects on every run, or %mwcluster restart for a fresh coordinator.")

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

    __init__.mw_ps_guard = True  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


def install() -> None:
    patch_when_imported(TARGET_MODULE, patch_strategy_classes)
    patch_when_imported(PS_MODULE, patch_ps_strategy)
