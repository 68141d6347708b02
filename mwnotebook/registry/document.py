"""The state document a running cluster publishes, written down once: its shape and its pure parts.

One shape for every reader: the kernel writes it (registry/publication.py), the Jupyter server
extension reads it, drops ``control`` and adds ``notebook``, ``uptime`` and each worker's
CPU and memory figures, flattened from ``usage`` (server/service.py ``_view``), and the clusters panel's
JavaScript shows it (labextension/src/index.js names this module). Nothing here has a
thread, a file or a process: what the document says about a task is what its launcher stated
(``local``: ``KernelHandle.on_this_machine``; ``scheduler.owned``: the launcher's ``status()``).

``workers`` lists every TensorFlow task of the cluster (cell kernels first, then a ``--ps``
cluster's servers), each with its ``role``; readers that count a user's tasks read that list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    from mwnotebook.config.spec import Backend

#: The document's format; a reader skips a file of another version (registry/state.py).
VERSION = 1

#: What a published cluster is doing; ``orphaned``: its owner is gone (registry/orphans.py).
Phase = Literal["starting", "idle", "running", "restarting", "stopping", "orphaned"]

_CELL_TEXT = 200


class Owner(TypedDict):
    """The process that published the document (registry/owner.py ``this_owner``)."""

    pid: int
    start_time: int | None
    uid: int
    kernel_id: str | None
    connection_file: str | None
    session_name: str | None
    argv0: str


class CellText(TypedDict, total=False):
    """The running (or last) cell: its first lines, when it began and (the last one) ended."""

    text: str
    since: float
    ended: float


class TaskUsage(TypedDict):
    """A cell kernel's CPU and memory as last read on its own host by the notebook's side
    (engine/usage.py: every 2 s while a cell runs, and at each ``Cluster.usage()`` /
    ``%mwcluster status``); ``read_at`` is when (this machine's clock). None where not read."""

    cpu_percent: float | None
    memory_bytes: int | None
    memory_limit: int | None
    near_limit: bool
    read_at: float


class Task(TypedDict):
    """One TensorFlow task (a kernel) of the cluster.

    ``local`` is the kernel handle's own ``on_this_machine``; ``pid_start`` (``/proc`` start
    time) is recorded for local tasks only. Only a task with both is ever signalled from here.
    ``usage``: its last CPU and memory figures (:class:`TaskUsage`), None before the first reading
    and for a ``--ps`` cluster's servers (which run no cell and are not read)."""

    index: int
    role: str
    task: str
    host: str
    pid: int | None
    pid_start: int | None
    local: bool
    state: str
    alive: bool
    tf_config: dict[str, Any]
    address: str
    runs_cell: bool
    restarts: int
    last_error: str
    usage: TaskUsage | None


class Scheduler(TypedDict, total=False):
    """The batch job the workers run in, as the launcher reports it (launchers/slurm/launcher.py
    ``status``). ``owned``: the launcher made the allocation (salloc) and it may be cancelled when
    its owner is gone; False for an allocation the user gave (``--slurm-job``, ``SLURM_JOB_ID``)."""

    job_id: str | None
    nodes: list[str]
    state: str
    owned: bool
    login: str | None


class ClusterDocument(TypedDict, total=False):
    """``<runtime>/mwnotebook/cluster-<id>.json``. The sweep adds ``orphaned_at`` and ``cleanup``."""

    version: int
    id: str
    created: float
    updated: float
    owner: Owner
    control: str | None
    engine: Backend
    hosts: list[str]
    spec: dict[str, Any]
    state: Phase
    cell: CellText | None
    last_cell: CellText | None
    restarts: int
    last_error: str
    scheduler: Scheduler | None
    workers: list[Task]
    orphaned_at: float
    cleanup: list[str]


def spec_summary(spec: Any) -> dict[str, Any]:
    """The options worth showing (``workers`` always; the others when set)."""
    fields = ("workers", "ps", "chief", "evaluator", "coordinator", "cpu", "gpus_per_worker", "hosts",
              "workers_per_host", "network", "max_restarts", "slurm", "slurm_job", "ray", "mixed_precision",
              "xla")
    summary = {}
    for name in fields:
        value = getattr(spec, name, None)
        if value not in (None, False, (), "", 0) or name == "workers":
            summary[name] = list(value) if isinstance(value, tuple) else value
    return summary


def first_lines(code: str, limit: int = _CELL_TEXT) -> str:
    """A cell as the panel shows it: its first three lines, at most ``limit`` characters."""
    text = "\n".join(line for line in code.strip().splitlines()[:3])
    return text if len(text) <= limit else text[:limit - 1] + "…"


def signalable(task: Task | dict[str, Any]) -> tuple[int, int] | None:
    """``(pid, start time)`` when the task is a process of this machine with its start time recorded;
    None otherwise (a remote task, or a pid without a start time: never signalled)."""
    pid, started = task.get("pid"), task.get("pid_start")
    if task.get("local") is True and isinstance(pid, int) and isinstance(started, int):
        return pid, started
    return None
