"""Process-tree scans: which mwnotebook processes a test left behind, counted, not assumed; and
ending the processes a fixture started (:func:`tree`, :func:`end_processes`).

A process whose parent dies is re-parented, normally to init, where a scan of this process's tree
would no longer see it. :func:`become_subreaper` makes the test process a child subreaper
(``PR_SET_CHILD_SUBREAPER``), so every orphan of its descendants is re-parented to it and stays in
its tree: a scan of the tree then sees all of them. mwnotebook's processes notice a dead parent
by ``getppid()`` changing, which a subreaper does not hide.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import psutil

WORKER_MODULES = ("mwnotebook.processes.worker_kernel",)
#: Every process mwnotebook starts: worker kernels, namespace holders, worker templates.
MW_MODULES = ("mwnotebook.processes.worker_kernel", "mwnotebook.processes.netns_holder",
              "mwnotebook.processes.worker_template")
#: What one cluster starts and must end when it stops. A worker template is not one cluster's: it
#: serves every cluster of its process and ends with that process.
CLUSTER_MODULES = ("mwnotebook.processes.worker_kernel", "mwnotebook.processes.netns_holder")
PR_SET_CHILD_SUBREAPER = 36
T = TypeVar("T")


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


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """True once ``pid`` no longer runs, False if it still does after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


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


def mw_tree(modules: tuple[str, ...] = MW_MODULES) -> set[int]:
    """Live mwnotebook processes in this process's tree (its orphans included, once a subreaper)."""
    return {p.pid for p in psutil.Process().children(recursive=True) if is_worker(p, modules)}


class OrphanScan:
    """Scan before, scan after: the mwnotebook processes that appeared and should be gone.

    ``keep`` names processes that may legitimately live on (a module-scoped cluster's current
    workers, as ``Cluster.status()`` reports them): excluded at the start and at the end.
    """

    def __init__(self, keep: Iterable[int] = (), modules: tuple[str, ...] = CLUSTER_MODULES) -> None:
        become_subreaper()
        self.modules = modules
        self.before = mw_tree(modules) - set(keep)

    def orphans(self, keep: Iterable[int] = (), timeout: float = 10.0) -> set[int]:
        """Processes started since the first scan that are still alive ``timeout`` s later."""
        keep = set(keep)
        deadline = time.monotonic() + timeout
        left = mw_tree(self.modules) - self.before - keep
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = alive_workers(left, self.modules)
        return left


def wait_for(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy and return that; a hang bound, not a timing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")
