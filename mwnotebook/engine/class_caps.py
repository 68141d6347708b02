"""Before a cluster starts: the teacher's caps (config/class_caps.py) against what this user runs.

What runs is read from the clusters' state files (mwnotebook/registry/state.py ``read_all``; a
file whose owner process is gone is not counted): each document's task list (every process of the
cluster that runs TensorFlow; a ``--coordinator notebook`` coordinator is the notebook's own
process and is not counted), or, while a cluster is still starting and lists none, the tasks its
options ask for. A start past ``MWNOTEBOOK_MAX_WORKERS`` or ``MEM_LIMIT`` raises :class:`CapExceeded`
before anything starts, naming the cap, what runs (which notebook, which cluster, how many tasks)
and how to stop it.

Two kernels starting at the same instant: each check runs under an exclusive lock on
``<registry dir>/caps.lock`` and leaves a claim file (``claim-<id>.json``: pid, tasks, time) until
its start has ended, so the second check counts the first start even before the first cluster's
state file is written. A claim is not counted once its owner process has published a state file
made after it (the same cluster, counted there), nor when its owner is gone.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mwnotebook.config.class_caps import MAX_WORKERS_VAR, MEM_LIMIT_VAR, ClassCaps, cluster_tasks, size_text
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.errors import ConfigError
from mwnotebook.registry import processes, state
from mwnotebook.registry.owner import this_owner

log = logging.getLogger(__name__)

LOCK_NAME = "caps.lock"
CLAIM_PREFIX = "claim-"
HOW_TO_STOP = ("`%mwcluster stop` in that notebook (`cluster.stop()` where the Python API started it, Ctrl-C "
               "for `mwnotebook run`), or its Stop button in the clusters panel (JupyterLab's left side bar)")


class CapExceeded(ConfigError):
    """A start refused by the teacher's caps (nothing was started)."""


def spec_tasks(spec: ClusterSpec) -> int:
    """The TensorFlow processes ``spec``'s cluster runs (config/class_caps.py ``cluster_tasks``)."""
    return cluster_tasks(spec.workers, spec.ps, spec.chief, spec.evaluator, spec.coordinator == "notebook")


def is_local(spec: ClusterSpec) -> bool:
    """Whether the tasks run on this machine (under this server's CPU and memory limits)."""
    return spec.ray is None and not spec.uses_slurm and not spec.hosts


@dataclass(frozen=True)
class RunningCluster:
    """One cluster of this user's, as its state file (or a start's claim) tells."""

    cluster_id: str
    tasks: int
    local: bool
    owner_pid: int | None
    where: str
    state: str

    def text(self) -> str:
        plural = "s" if self.tasks != 1 else ""
        return f"{self.where}: {self.tasks} task{plural} (cluster {self.cluster_id}, {self.state})"


def _where(owner: Mapping[str, Any]) -> str:
    pid = owner.get("pid")
    session = owner.get("session_name")
    kernel = owner.get("kernel_id")
    if pid == os.getpid():
        return "this notebook" if kernel or session else f"this process (pid {pid})"
    if session:
        return f"notebook {session!r}" + (f" (kernel {str(kernel)[:8]}, pid {pid})" if kernel else f" (pid {pid})")
    if kernel:
        return f"kernel {str(kernel)[:8]} (pid {pid})"
    argv0 = str(owner.get("argv0") or "python")
    return f"a notebook kernel (pid {pid})" if "ipykernel" in argv0 else f"process {pid} ({argv0})"


def document_tasks(document: Mapping[str, Any]) -> int:
    """The TensorFlow processes a state document stands for: its task list (without the notebook's
    own process), or while that is empty (a start under way) the tasks its options ask for."""
    owner_pid = (document.get("owner") or {}).get("pid")
    listed = [task for task in document.get("workers") or []
              if isinstance(task, Mapping) and task.get("state") != "notebook"
              and not (owner_pid is not None and task.get("pid") == owner_pid)]
    if listed:
        return len(listed)
    spec = document.get("spec") or {}
    try:
        return cluster_tasks(int(spec.get("workers") or 1), int(spec.get("ps") or 0), bool(spec.get("chief")),
                             bool(spec.get("evaluator")), spec.get("coordinator") == "notebook")
    except (TypeError, ValueError):
        return 1


def _document_local(document: Mapping[str, Any]) -> bool:
    backend = document.get("backend") or document.get("engine") or "local"
    return backend == "local"


def running_clusters(directory: Path, exclude: Collection[str] = ()) -> list[RunningCluster]:
    """This user's clusters whose owner process lives (state files, then starts' claims not yet
    published), but those in ``exclude`` (ids: a cluster this start replaces, or restarts)."""
    found: list[RunningCluster] = []
    published: dict[int, float] = {}  # owner pid -> the newest state file's creation time
    for _path, document in state.read_all(directory):
        owner = document.get("owner") or {}
        if not processes.is_running(owner.get("pid"), owner.get("start_time")):
            continue
        if document.get("state") == "orphaned":
            continue
        pid = owner.get("pid")
        if isinstance(pid, int):
            published[pid] = max(published.get(pid, 0.0), float(document.get("created") or 0.0))
        cluster_id = str(document.get("id") or _path.stem.removeprefix("cluster-"))
        if cluster_id in exclude:
            continue
        found.append(RunningCluster(cluster_id, document_tasks(document), _document_local(document),
                                    pid if isinstance(pid, int) else None, _where(owner),
                                    str(document.get("state") or "running")))
    for path, claim in _claims(directory):
        pid = claim.get("pid")
        if not isinstance(pid, int) or not processes.is_running(pid, claim.get("start_time")):
            state.remove(path)  # its process ended without releasing it (killed mid-start)
            continue
        if published.get(pid, -1.0) >= float(claim.get("created") or 0.0):
            continue  # its cluster's state file is out: counted above
        found.append(RunningCluster(str(claim.get("cluster") or "(starting)"), int(claim.get("tasks") or 0),
                                    bool(claim.get("local")), pid,
                                    _where({"pid": pid, "session_name": claim.get("session_name"),
                                            "kernel_id": claim.get("kernel_id"), "argv0": claim.get("argv0")}),
                                    str(claim.get("state") or "starting")))
    return found


def _claims(directory: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith(CLAIM_PREFIX) and name.endswith(".json"):
            try:
                document = state.read_state(directory / name)
            except state.NotYours:
                continue
            if document is not None:
                yield directory / name, document


def task_refusal(caps: ClassCaps, asked: int, running: list[RunningCluster]) -> str | None:
    """Why ``asked`` more tasks pass ``MWNOTEBOOK_MAX_WORKERS`` beside ``running`` (None: they fit)."""
    if caps.max_workers is None:
        return None
    now = sum(c.tasks for c in running)
    if now + asked <= caps.max_workers:
        return None
    room = max(0, caps.max_workers - now)
    lines = [f"{MAX_WORKERS_VAR}={caps.max_workers} (the teacher's cap on the TensorFlow tasks you run at once, "
             f"across your notebooks) refuses this cluster: it needs {asked} task{'s' if asked != 1 else ''}, "
             f"and {now} {'are' if now != 1 else 'is'} running ({now} + {asked} > {caps.max_workers}). "
             "Nothing was started."]
    lines += [f"  running: {c.text()}" for c in running]
    lines.append(f"To go on, stop a cluster: {HOW_TO_STOP}"
                 + (f"; or ask for fewer tasks (at most {room} fit now)." if room else "."))
    return "\n".join(lines)


def memory_refusal(caps: ClassCaps, asked: int, running: list[RunningCluster], here: int) -> str | None:
    """Why a local cluster of ``asked`` tasks, started by process ``here``, would pass ``MEM_LIMIT``
    with this user's other local clusters (a worker template per process that runs them, this one's
    included: the magic starts it as it loads, launchers/local/prestart.py); None when it fits."""
    if caps.mem_limit is None:
        return None
    local = [c for c in running if c.local]
    tasks = asked + sum(c.tasks for c in local)
    templates = len({c.owner_pid for c in local} | {here})
    needed = caps.memory_needed(tasks, templates)
    if needed <= caps.mem_limit:
        return None
    fp = caps.footprint
    lines = [f"{MEM_LIMIT_VAR}={caps.mem_limit} ({size_text(caps.mem_limit)}, this server's memory limit) "
             f"refuses this cluster: with it your local TensorFlow tasks would take about {size_text(needed)} "
             f"= {templates} worker template{'s' if templates != 1 else ''} x {size_text(fp.template)} + "
             f"{tasks} task{'s' if tasks != 1 else ''} x {size_text(fp.task)} ({asked} asked"
             + (f", {tasks - asked} running" if tasks != asked else "")
             + "; figures measured after the seed cell, docs/guide/caps.md). Nothing was started."]
    lines += [f"  running: {c.text()}" for c in local]
    room = max(0, (caps.mem_limit - templates * fp.template) // fp.task - (tasks - asked))
    fewer = f"ask for fewer tasks (at most {room} fit now)" if room else "ask for no more tasks here"
    lines.append(f"To go on, {fewer}" + (f", or stop a cluster: {HOW_TO_STOP}." if local else "."))
    return "\n".join(lines)


class Claim:
    """A start's claim on the caps, counted by other kernels' checks until :meth:`release`."""

    def __init__(self, path: Path | None) -> None:
        self._path = path

    def release(self) -> None:
        path, self._path = self._path, None
        if path is not None:
            state.remove(path)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    state.ensure_dir(directory)
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def admit(caps: ClassCaps, spec: ClusterSpec, *, directory: Path | None = None, exclude: Collection[str] = (),
          owner: Mapping[str, Any] | None = None, unpublished: str | None = None) -> Claim:
    """Check a start of ``spec`` against the caps and claim its tasks; raise :class:`CapExceeded`.

    ``exclude``: ids of clusters this start replaces (this kernel's running cluster of other
    options) or that are this cluster itself; ``owner``: who claims (mwnotebook/registry/owner.py
    ``this_owner``, for the other kernels' messages); ``unpublished``: what to call a cluster that
    publishes no state file (``mwnotebook run``), whose claim then stands for it until released.
    Without a task or memory cap: nothing is read and the claim is empty."""
    if not caps.counts_running:
        return Claim(None)
    where = directory if directory is not None else state.registry_dir()
    asked = spec_tasks(spec)
    local = is_local(spec)
    with _locked(where):
        running = running_clusters(where, exclude)
        refusal = task_refusal(caps, asked, running)
        if refusal is None and local:
            refusal = memory_refusal(caps, asked, running, here=os.getpid())
        if refusal is not None:
            raise CapExceeded(refusal)
        path = where / f"{CLAIM_PREFIX}{state.new_id()}.json"
        who = dict(owner or {})
        state.write_state(path, {
            "version": state.VERSION, "pid": os.getpid(), "start_time": processes.start_time(os.getpid()),
            "created": time.time(), "tasks": asked, "local": local, "session_name": who.get("session_name"),
            "kernel_id": who.get("kernel_id"), "argv0": who.get("argv0"),
            "cluster": unpublished or "(starting)", "state": "running" if unpublished else "starting"})
    return Claim(path)


class CapsCheck:
    """The teacher's caps for one cluster: the one place a start is checked, whoever starts it.

    :class:`~mwnotebook.engine.async_cluster.AsyncCluster` holds one; ``Cluster.start`` and
    ``start_background`` claim through it, the magic's check before it replaces a kernel's cluster is
    :meth:`check` (``Cluster.check_caps``), and ``mwnotebook run`` claims for its whole run
    (``unpublished``: the command publishes no state file, so its claim stands for its cluster).
    Without caps, or with no cap that counts running tasks, it reads nothing.
    """

    def __init__(self, caps: ClassCaps | None, spec: ClusterSpec, *, unpublished: str | None = None,
                 directory: Path | None = None) -> None:
        self.caps = caps
        self._spec = spec
        self._unpublished = unpublished
        self._directory = directory  # the registry's (None: this user's, registry/state.py)
        self._claim: Claim | None = None

    @property
    def counts(self) -> bool:
        """Whether a start is checked at all (a task or memory cap is set)."""
        return self.caps is not None and self.caps.counts_running

    @property
    def claimed(self) -> bool:
        """Whether a claim is held (a start under way, or a command's run)."""
        return self._claim is not None

    def check(self, exclude: Collection[str] = ()) -> None:
        """Raise :class:`CapExceeded` if a start now would pass the caps; claims nothing. ``exclude``:
        ids of clusters that do not count (this one, one it replaces)."""
        if self.caps is not None and self.counts:
            admit(self.caps, self._spec, directory=self._directory, exclude=exclude, owner=this_owner()).release()

    def claim(self, exclude: Collection[str] = ()) -> bool:
        """Check a start and claim its tasks until :meth:`release` (False: no new claim was needed,
        one is held already or nothing counts). Raises :class:`CapExceeded` before anything starts."""
        if self.caps is None or not self.counts or self._claim is not None:
            return False
        self._claim = admit(self.caps, self._spec, directory=self._directory, exclude=exclude, owner=this_owner(),
                            unpublished=self._unpublished)
        return True

    def release(self, _done: object = None) -> None:
        """End the claim (when the start has ended: the cluster's state file counts it from then on;
        a command's, when its run has ended). ``_done``: a finished future, when used as its callback."""
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()


def running_summary(caps: ClassCaps, directory: Path | None = None) -> str:
    """One line for ``%mwcluster status``: the tasks this user runs against the task cap."""
    if caps.max_workers is None:
        return ""
    try:
        running = running_clusters(directory if directory is not None else state.registry_dir())
    except OSError as exc:
        return f"your running TensorFlow tasks: unknown ({exc})"
    now = sum(c.tasks for c in running)
    return (f"your running TensorFlow tasks: {now} of {caps.max_workers}"
            + "".join(f"\n  {c.text()}" for c in running))
