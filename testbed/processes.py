"""Process-tree scans: which mwnotebook processes a test left behind, counted, not assumed
(:func:`worker_processes`, :func:`descendants`, :class:`OrphanScan`); waiting for processes to end
(:func:`wait_gone`); and ending the processes a fixture started (:func:`tree`, :func:`end_processes`,
:func:`kill_all`).

A process whose parent dies is re-parented, normally to init, where a scan of this process's tree
would no longer see it. :func:`become_subreaper` makes the test process a child subreaper
(``PR_SET_CHILD_SUBREAPER``), so every orphan of its descendants is re-parented to it and stays in
its tree: a scan of the tree then sees all of them. mwnotebook's processes notice a dead parent
by ``getppid()`` changing, which a subreaper does not hide.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Iterable, Sequence

import psutil

WORKER_MODULES = ("mwnotebook.processes.worker_kernel",)
#: Every process mwnotebook starts: worker kernels, namespace holders, worker templates.
MW_MODULES = ("mwnotebook.processes.worker_kernel", "mwnotebook.processes.netns_holder",
              "mwnotebook.processes.worker_template")
#: What one cluster starts and must end when it stops. A worker template is not one cluster's: it
#: serves every cluster of its process and ends with that process.
CLUSTER_MODULES = ("mwnotebook.processes.worker_kernel", "mwnotebook.processes.netns_holder")
PR_SET_CHILD_SUBREAPER = 36


def is_worker(proc: psutil.Process, modules: tuple[str, ...] = WORKER_MODULES) -> bool:
    """A live (not zombie) process running one of mwnotebook's ``modules``."""
    try:
        cmd = proc.cmdline()
        return any(m in cmd for m in modules) and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def alive_workers(pids: Iterable[int], modules: tuple[str, ...] = WORKER_MODULES) -> set[int]:
    """Those of ``pids`` that are still live mwnotebook processes, wherever they were reparented."""
    alive = set()
    for pid in pids:
        try:
            if is_worker(psutil.Process(pid), modules):
                alive.add(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def running(pid: int) -> bool:
    """The process exists and has not ended. An ended process stays in /proc as a zombie until its
    parent reaps it, and an orphan's parent is this test process once it is a subreaper
    (:func:`become_subreaper`), which reaps nobody: "its /proc entry exists" is not "it runs"."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: int | Iterable[int], timeout: float = 10.0, modules: tuple[str, ...] | None = None,
              interval: float = 0.05) -> tuple[set[int], float]:
    """Wait until none of ``pids`` runs; with ``modules``, until none is a live process of those
    mwnotebook modules (a pid the system gave to another program then counts as gone).

    Returns (those still running, seconds waited): the one wait for processes to end that tests, the
    test bed and benchmarks use. ``timeout`` is a hang bound, not a timing."""
    left = {pids} if isinstance(pids, int) else set(pids)

    def still(among: set[int]) -> set[int]:
        return alive_workers(among, modules) if modules else {pid for pid in among if running(pid)}

    started = time.monotonic()
    left = still(left)
    while left and time.monotonic() - started < timeout:
        time.sleep(interval)
        left = still(left)
    return left, time.monotonic() - started


def worker_processes(modules: tuple[str, ...] = WORKER_MODULES) -> list[psutil.Process]:
    """Live mwnotebook processes (by default worker kernels) started, directly or not, by this process.

    Other test runs on the same machine have workers of their own; those are not ours to count."""
    return [p for p in psutil.Process().children(recursive=True) if is_worker(p, modules)]


def descendants(pid: int | None = None, modules: tuple[str, ...] = CLUSTER_MODULES) -> set[int]:
    """Live mwnotebook processes of ``modules`` below ``pid`` (default: this process); by default
    worker kernels and namespace holders, ``modules=MW_MODULES`` adds the worker templates."""
    try:
        root = psutil.Process(pid) if pid else psutil.Process()
        return {p.pid for p in root.children(recursive=True) if is_worker(p, modules)}
    except psutil.NoSuchProcess:
        return set()


def kill_all(pids: Iterable[int], modules: tuple[str, ...] = MW_MODULES) -> None:
    """Last-resort clean-up of mwnotebook processes a failed test left behind (ours only, by pid):
    SIGCONT first (a stopped process must not stay stopped), then SIGKILL."""
    for pid in alive_workers(pids, modules):
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def tree(pid: int) -> list[psutil.Process]:
    """``pid``'s process and all its descendants (empty when it is gone): listed before it is
    stopped, since a dead parent's children are re-parented out of its tree."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def end_processes(procs: Sequence[psutil.Process], grace: float = 10.0, wait: float = 10.0) -> list[psutil.Process]:
    """SIGTERM to ``procs`` and up to ``grace`` s for them to end (``grace=0``: no SIGTERM), then
    SIGKILL to the rest and up to ``wait`` s (``wait=0``: not waited for, as a machine that dies).
    Returns those still alive. A process already gone is skipped."""
    alive = list(procs)
    if grace > 0:
        for proc in alive:
            try:
                proc.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(alive, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    if wait <= 0:
        return [proc for proc in alive if running(proc.pid)]
    return psutil.wait_procs(alive, timeout=wait)[1]


def become_subreaper() -> None:
    """Make this process the reaper of its descendants' orphans (Linux), so scans see them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


class OrphanScan:
    """Scan before, scan after: the mwnotebook processes that appeared and should be gone.

    ``keep`` names processes that may legitimately live on (a module-scoped cluster's current
    workers, as ``Cluster.status()`` reports them): excluded at the start and at the end.
    """

    def __init__(self, keep: Iterable[int] = (), modules: tuple[str, ...] = CLUSTER_MODULES) -> None:
        become_subreaper()
        self.modules = modules
        self.before = descendants(None, modules) - set(keep)

    def orphans(self, keep: Iterable[int] = (), timeout: float = 10.0) -> set[int]:
        """Processes started since the first scan that are still alive ``timeout`` s later."""
        appeared = descendants(None, self.modules) - self.before - set(keep)
        return wait_gone(appeared, timeout, self.modules, interval=0.1)[0]
