"""Worker side: the process's one ``MultiWorkerMirroredStrategy``, made the right way, once.

Runs inside each worker kernel. Re-exported by :mod:`mwnotebook.worker` as ``strategy``,
``global_batch``, ``num_replicas`` (and ``visible_devices``).

Why a helper: MWMS must be created before any other TensorFlow op in the process (otherwise
``RuntimeError: Collective ops must be configured at program startup``), and the cluster topology
cannot change inside a process. In a notebook, cells are re-run, so the natural
``strategy = tf.distribute.MultiWorkerMirroredStrategy()`` in a cell is created again and again.
:func:`strategy` creates it on first use and returns the same object on every later call, in
every later cell, and it turns the two classic mistakes into an explanation: a TF op first
(TensorFlow raises a bare ``RuntimeError``), and NCCL without a GPU (TensorFlow only logs
"Enabled NCCL communication but no GPUs detected" and carries on, hiding the mistake).

Nothing here creates a tensor before the strategy exists: ``tf.config.list_physical_devices``
does not initialise the runtime (measured: MWMS created after it works).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from mwnotebook.errors import ConfigError
from mwnotebook.recipes import global_batch_size
from mwnotebook.shared.collectives import COLLECTIVE_ENV, COLLECTIVES
from mwnotebook.worker._roles import cluster_workers

log = logging.getLogger(__name__)


_lock = threading.Lock()
_strategy: Any = None
_options: tuple[str, float | None] | None = None


class StrategyError(ConfigError):
    """The strategy cannot be created as asked; the message says what to change."""


def _resolve_collective(collective: str | None) -> str:
    value = collective if collective is not None else os.environ.get(COLLECTIVE_ENV, "") or "auto"
    value = value.strip().lower()
    if value not in COLLECTIVES:
        raise StrategyError(f"collective must be one of {', '.join(COLLECTIVES)} (got {value!r})")
    return value


def _tf() -> Any:
    import tensorflow as tf  # imported lazily: a worker may not need TF until the first cell

    return tf


def _gpu_count(tf: Any) -> int:
    # list_physical_devices does not initialise the runtime, so it is safe before the strategy.
    return len(tf.config.list_physical_devices("GPU"))


def _worker_count() -> int:
    """Replicas in TF_CONFIG: ``chief`` and ``worker`` tasks both (``--chief`` makes replica 0 a chief)."""
    counted = cluster_workers()
    if counted:
        return counted
    return max(1, int(os.environ.get("MWNOTEBOOK_NUM_WORKERS", "1") or 1))


def strategy(collective: str | None = None, timeout: float | None = None) -> Any:
    """The process's ``tf.distribute.MultiWorkerMirroredStrategy``, created on first call.

    ``collective``: ``"auto"`` (NCCL between GPUs, ring otherwise), ``"ring"`` or ``"nccl"``;
    default from ``$MWNOTEBOOK_COLLECTIVE`` (set by ``%%mwtrain --collective``), else ``"auto"``.
    ``timeout``: seconds after which a blocked collective raises ``DeadlineExceededError``
    instead of waiting forever for a dead peer (``CommunicationOptions.timeout_seconds``).

    Later calls return the same object. Calling again with *different* explicit options raises
    :class:`StrategyError`: the topology and collective of a process are fixed at startup, so
    changing them needs fresh workers (``%mwcluster restart``).
    """
    global _strategy, _options
    from mwnotebook.worker._ps import ps_task_count

    if ps_task_count():
        raise StrategyError("this is a parameter-server cluster (%%mwtrain --ps): mw.strategy() is "
                            "MultiWorkerMirroredStrategy. Use mw.ps_strategy() and mw.coordinator(), or "
                            "start the cluster without --ps")
    wanted_collective = _resolve_collective(collective) if collective is not None else None
    if timeout is not None and timeout <= 0:
        raise StrategyError(f"timeout must be a positive number of seconds (got {timeout!r})")
    with _lock:
        if _strategy is not None:
            assert _options is not None
            have_collective, have_timeout = _options
            if ((wanted_collective is not None and wanted_collective != have_collective)
                    or (timeout is not None and timeout != have_timeout)):
                raise StrategyError(
                    f"this worker already has its strategy (collective={have_collective!r}, "
                    f"timeout={have_timeout!r}); a process cannot change it. Restart the workers "
                    "(%mwcluster restart) to use other options.")
            return _strategy
        chosen = wanted_collective or _resolve_collective(None)
        tf = _tf()
        if chosen == "nccl" and _gpu_count(tf) == 0:
            raise StrategyError(
                "collective='nccl' needs GPUs: NCCL all-reduce runs between CUDA devices, and this "
                f"worker sees none (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}). "
                "Use collective='ring' (gRPC all-reduce, works on CPU) or 'auto' (NCCL when there "
                "are GPUs, ring otherwise); on a GPU machine start the cluster without --cpu.")
        impl = tf.distribute.experimental.CommunicationImplementation
        options = tf.distribute.experimental.CommunicationOptions(
            implementation={"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}[chosen],
            timeout_seconds=timeout,
        )
        try:
            made = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        except RuntimeError as exc:
            if "program startup" in str(exc):
                raise StrategyError(
                    "the strategy must be created before any other TensorFlow op in the worker, "
                    "and this worker already ran one (a tensor, a model, a dataset...). Restart the "
                    "workers (%mwcluster restart) and call mw.strategy() first in the cell.") from exc
            raise
        _strategy, _options = made, (chosen, timeout)
        log.info("created MultiWorkerMirroredStrategy: collective=%s timeout=%s replicas=%d",
                 chosen, timeout, made.num_replicas_in_sync)
        return made


def num_replicas() -> int:
    """Replicas in sync: workers x devices per worker (GPUs, or 1 for the CPU).

    Equals ``strategy().num_replicas_in_sync``; before the strategy exists it is computed from
    ``TF_CONFIG`` and the visible GPUs without creating a tensor, so calling it first is safe.
    """
    with _lock:
        if _strategy is not None:
            return int(_strategy.num_replicas_in_sync)
    return _worker_count() * max(1, _gpu_count(_tf()))


def global_batch(per_replica: int) -> int:
    """Global batch = per-replica batch x :func:`num_replicas` (the seed's ``GLOBAL_BATCH``)."""
    return global_batch_size(per_replica, replicas=num_replicas())


def visible_devices() -> dict[str, Any]:
    """What TensorFlow in this worker sees (safe before the strategy: creates no tensor)."""
    tf = _tf()
    return {
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
        "cpus": [d.name for d in tf.config.list_physical_devices("CPU")],
    }
