"""mwnotebook: multi-worker TensorFlow training inside a Jupyter notebook.

``%load_ext mwnotebook`` registers ``%%mwtrain`` and ``%mwcluster``; the same machinery is a plain
Python API: :class:`Cluster` (blocking) and :class:`AsyncCluster`.

The names below are loaded on first use (PEP 562), not at ``import mwnotebook``: a worker kernel
imports ``mwnotebook.worker`` and must not load the engine (jupyter_client, zmq) that only the
notebook process runs. See ARCHITECTURE.md for which process runs which package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "AsyncCluster": "mwnotebook.engine.async_cluster",
    "WorkerInfo": "mwnotebook.engine.cluster_status",
    "Cluster": "mwnotebook.engine.cluster",
    "RunResult": "mwnotebook.engine.cell.result",
    "ClusterSpec": "mwnotebook.config.spec",
    "CapExceeded": "mwnotebook.engine.class_caps",
    "ParameterServerLost": "mwnotebook.engine.roles.task_servers",
    "SecondClusterRefused": "mwnotebook.engine.roles.notebook_coordinator",
    "runs": "mwnotebook.frontend.notebook.runs_view",
    **{name: "mwnotebook.experiments.profile" for name in ("ProfileRequest", "ProfileSummary", "run_profiled")},
    "StartAborted": "mwnotebook.launchers.slurm.job",
    **{name: "mwnotebook.errors" for name in (
        "CannotRestartError", "ClusterInterrupted", "ClusterRunError", "ClusterStartError", "ClusterStateError",
        "ClusterTimeoutError", "ConfigError", "MWNotebookError", "RestartFailedError", "WorkerDiedError",
        "WorkerError", "WorkerFailure")},
}

__all__ = [
    "AsyncCluster", "CannotRestartError", "CapExceeded", "Cluster", "ClusterInterrupted", "ClusterRunError",
    "ClusterSpec", "ClusterStartError", "ClusterStateError", "ClusterTimeoutError", "ConfigError", "MWNotebookError",
    "ParameterServerLost", "ProfileRequest", "ProfileSummary", "RestartFailedError", "RunResult",
    "SecondClusterRefused", "StartAborted", "run_profiled", "runs",
    "WorkerDiedError", "WorkerError", "WorkerFailure", "WorkerInfo", "load_ipython_extension",
    "unload_ipython_extension",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from mwnotebook.config.spec import ClusterSpec
    from mwnotebook.engine.async_cluster import AsyncCluster
    from mwnotebook.engine.cell.result import RunResult
    from mwnotebook.engine.class_caps import CapExceeded
    from mwnotebook.engine.cluster import Cluster
    from mwnotebook.engine.cluster_status import WorkerInfo
    from mwnotebook.engine.roles.notebook_coordinator import SecondClusterRefused
    from mwnotebook.engine.roles.task_servers import ParameterServerLost
    from mwnotebook.errors import (
        CannotRestartError,
        ClusterInterrupted,
        ClusterRunError,
        ClusterStartError,
        ClusterStateError,
        ClusterTimeoutError,
        ConfigError,
        MWNotebookError,
        RestartFailedError,
        WorkerDiedError,
        WorkerError,
        WorkerFailure,
    )
    from mwnotebook.experiments.profile import ProfileRequest, ProfileSummary, run_profiled
    from mwnotebook.frontend.notebook.runs_view import runs
    from mwnotebook.launchers.slurm.job import StartAborted


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mwnotebook' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext mwnotebook``: register the magics (IPython imported only here).

    Refused inside a worker kernel (``MWNOTEBOOK_WORKER``, set by the worker's entry point): a
    nested ``%%mwtrain`` would start a cluster per worker.
    """
    import os

    if os.environ.get("MWNOTEBOOK_WORKER") == "1":
        raise RuntimeError(
            "mwnotebook: this kernel is a %%mwtrain worker; %load_ext mwnotebook and %%mwtrain only "
            "work in the notebook's own kernel (run the %%mwtrain cell there, not inside one)")
    from mwnotebook.frontend.notebook.magics import register

    register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext mwnotebook``: remove the magics again (running clusters are left as they are)."""
    from mwnotebook.frontend.notebook.magics import unregister

    unregister(ipython)
