"""Worker side, in a ``%%mwtrain --ps`` cluster's coordinator kernel: the process's one
``ParameterServerStrategy`` and its ``ClusterCoordinator``, made once.

Why once: a process can connect to one TensorFlow cluster only. Connecting again leaves the old
gRPC server listening, invalidates the old variables, and touching the old coordinator afterwards
crashed the whole process in our measurements (config/roles.py, engine/roles/task_servers.py). Re-running
the cell is the normal notebook habit, so :func:`ps_strategy` and :func:`coordinator` return the
same objects on every later call, in every later cell.

Stock tutorial code (``TFConfigClusterResolver()`` then ``ParameterServerStrategy(resolver)``) works
too, run once per kernel.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

from mwnotebook.errors import ConfigError

log = logging.getLogger(__name__)

_lock = threading.Lock()
_strategy: Any = None
_coordinator: Any = None


class NotAParameterServerCluster(ConfigError):
    """``mw.ps_strategy()`` outside a ``--ps`` cluster's coordinator."""


def ps_task_count() -> int:
    """Parameter servers in this kernel's TF_CONFIG (0: not a --ps cluster)."""
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "") or "{}").get("cluster") or {}
    except (ValueError, AttributeError):
        return 0
    return len(cluster.get("ps") or []) if isinstance(cluster, dict) else 0


def _check_coordinator() -> None:
    from mwnotebook.worker._roles import task_type

    if ps_task_count() == 0:
        raise NotAParameterServerCluster(
            "mw.ps_strategy() needs a parameter-server cluster: start it with %%mwtrain --ps P "
            "--workers N. This cluster is for MultiWorkerMirroredStrategy: use mw.strategy().")
    if task_type() != "chief":
        raise NotAParameterServerCluster(
            f"mw.ps_strategy() runs in the coordinator (task 'chief'); this kernel is {task_type()!r}")
    if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise NotAParameterServerCluster(
            "ParameterServerStrategy works only with tf_keras (TF_USE_LEGACY_KERAS=1 at start-up); "
            "start the cluster without --no-legacy-keras")


def ps_strategy(min_shard_bytes: int = 256 << 10) -> Any:
    """The coordinator's ``tf.distribute.ParameterServerStrategy`` for the cluster in TF_CONFIG.

    Large variables are split over the parameter servers (``MinSizePartitioner``: shards of at least
    ``min_shard_bytes``, at most one per ps), as TensorFlow's guide recommends.
    """
    global _strategy
    with _lock:
        if _strategy is not None:
            return _strategy
        _check_coordinator()
        import tensorflow as tf

        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=min_shard_bytes, max_shards=ps_task_count())
        _strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
        log.info("created ParameterServerStrategy: %d ps", ps_task_count())
        return _strategy


def coordinator() -> Any:
    """The ``tf.distribute.coordinator.ClusterCoordinator`` of :func:`ps_strategy` (made once)."""
    global _coordinator
    made = ps_strategy()
    with _lock:
        if _coordinator is None:
            import tensorflow as tf

            _coordinator = tf.distribute.coordinator.ClusterCoordinator(made)
        return _coordinator


def forget() -> None:
    """Drop the strategy and coordinator so the next call makes new ones (a notebook forced onto a
    second cluster, engine/roles/notebook_coordinator.py: the old objects must not be touched again)."""
    global _strategy, _coordinator
    with _lock:
        _strategy = None
        _coordinator = None
