"""mwnotebook: multi-worker TensorFlow training inside a Jupyter notebook.

``%load_ext mwnotebook`` registers ``%%mwtrain`` and ``%mwcluster``; the same machinery is a plain
Python API: :class:`Cluster` (blocking) and :class:`AsyncCluster`.
"""

from __future__ import annotations

from typing import Any

from .cluster import AsyncCluster, WorkerInfo
from .errors import (ClusterInterrupted, ClusterRunError, ClusterStartError, ClusterStateError,
                     ClusterTimeoutError, ConfigError, MWNotebookError, WorkerDiedError, WorkerError,
                     WorkerFailure)
from .result import RunResult
from .spec import ClusterSpec
from .sync import Cluster

__version__ = "0.1.0"

__all__ = [
    "AsyncCluster", "Cluster", "ClusterInterrupted", "ClusterRunError", "ClusterSpec", "ClusterStartError",
    "ClusterStateError", "ClusterTimeoutError", "ConfigError", "MWNotebookError", "RunResult",
    "WorkerDiedError", "WorkerError", "WorkerFailure", "WorkerInfo", "load_ipython_extension",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext mwnotebook``: register the magics (IPython imported only here)."""
    from .magics import register

    register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .magics import unregister

    unregister(ipython)
