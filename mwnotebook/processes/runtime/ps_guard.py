"""A stock ``MultiWorkerMirroredStrategy()`` in a ``%%mwtrain --ps`` cluster's coordinator gets a
message that says which strategy the cluster is for.

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

from mwnotebook.processes.runtime.after_import import patch_when_imported
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
        if cls is None or getattr(cls.__init__, "_mw_ps_guard", False):
            continue
        original = cls.__init__

        def __init__(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> None:
            if in_ps_cluster():
                raise WrongStrategyForCluster(MESSAGE)
            __original(self, *args, **kwargs)

        __init__._mw_ps_guard = True  # type: ignore[attr-defined]
        __init__.__doc__ = original.__doc__
        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        cls.__init__ = __init__


def install() -> None:
    patch_when_imported(TARGET_MODULE, patch_strategy_classes)
