"""Worker side: which TensorFlow task this kernel is, read from its ``TF_CONFIG`` (no TensorFlow).

Why it matters. With ``%%mwtrain --chief`` replica 0's task is ``chief`` and the others are
``worker`` 0..N-2. Code that decides "am I the one that saves?" by checking for ``worker`` 0 (as
TensorFlow's own multi-worker Keras tutorial does in its ``_is_chief``) then picks the *second*
replica, and the chief's own copy goes to a temporary directory: nothing fails, the saved model
is simply the wrong process's. :func:`is_chief` answers for both layouts, and :func:`save_path`
gives each task the path it should write to.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any


def _tf_config() -> dict[str, Any]:
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def task_type() -> str:
    """``"chief"``, ``"worker"``, ``"ps"`` or ``"evaluator"`` (``"worker"`` without a TF_CONFIG)."""
    task = _tf_config().get("task") or {}
    return str(task.get("type") or "worker")


def task_index() -> int:
    """This kernel's ``task.index`` in its TF_CONFIG (0 when there is none): its place among its role's tasks."""
    task = _tf_config().get("task") or {}
    try:
        return int(task.get("index") or 0)
    except (TypeError, ValueError):
        return 0


def cluster_workers() -> int:
    """Replicas of a MultiWorkerMirroredStrategy cluster: its ``chief`` and ``worker`` tasks."""
    cluster = _tf_config().get("cluster") or {}
    if not isinstance(cluster, dict):
        return 0
    return len(cluster.get("chief") or []) + len(cluster.get("worker") or [])


def has_chief() -> bool:
    return bool((_tf_config().get("cluster") or {}).get("chief"))


def is_chief() -> bool:
    """True in the one task that saves: ``chief`` 0 when the cluster has a chief, else ``worker`` 0."""
    kind, index = task_type(), task_index()
    if kind == "chief":
        return True
    return kind == "worker" and index == 0 and not has_chief()


def save_path(path: str) -> str:
    """Where this task writes a model or checkpoint that only the chief keeps.

    Every MWMS replica must take part in saving (the save runs collectives), but only the chief's
    copy is kept: the chief gets ``path``; any other task gets a private temporary directory of its
    own (delete it after the save, or leave it to the temporary directory's clean-up).
    """
    if is_chief():
        return path
    base = os.path.basename(os.path.normpath(path)) or "model"
    return os.path.join(tempfile.mkdtemp(prefix=f"mwnotebook-{task_type()}-{task_index()}-"), base)
