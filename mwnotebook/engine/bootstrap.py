"""What the cluster does to each fresh worker before the user's first cell: the devices it sees
and the set-up code it runs (TensorFlow preload, mixed precision, XLA)."""

from __future__ import annotations

from mwnotebook.config.devices import visible_devices_per_worker as _partition_devices
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import setup_code as _recipe_code

#: Imports TensorFlow without running any TF op, so that a later MultiWorkerMirroredStrategy can
#: still configure the process's collectives.
PRELOAD_CODE = "import tensorflow as _mw_tf  # preloaded by mwnotebook\n"


#: Installs the hold on replaced objects (see mwnotebook/worker/_lifetime.py). A remote host without
#: mwnotebook installed still works, without that protection.
LIFETIME_CODE = ("try:\n    import mwnotebook.worker._lifetime as _mwl\n    _mwl.install()\n    del _mwl\n"
                 "except ImportError:\n    pass\n")

#: Run silently on every worker once a cell has ended on all of them.
RELEASE_CODE = ("try:\n    import mwnotebook.worker._lifetime as _mwl\n    _mwl.release()\n    del _mwl\n"
                "except ImportError:\n    pass\n")


#: Evaluated by each worker after every cell (an execute request's user_expressions): "True" when
#: replaced objects must be freed between cells (see mwnotebook/worker/_lifetime.py).
SETTLE_EXPRESSION = "__import__('mwnotebook.worker._lifetime', fromlist=['settle']).settle()"


def setup_code(spec: ClusterSpec) -> str:
    """Code executed silently in every worker right after it starts."""
    parts = [LIFETIME_CODE]
    if spec.preload or spec.mixed_precision or spec.xla:
        parts.append(PRELOAD_CODE)
    parts.append(_recipe_code(spec))
    return "".join(parts)


def visible_devices_per_worker(spec: ClusterSpec) -> list[str | None]:
    """Each worker's CUDA_VISIBLE_DEVICES (None: leave the notebook's own setting).

    Raises ConfigError, before any worker starts, when more GPUs are asked for than exist.
    """
    return _partition_devices(spec)
