"""Die with my owner: the one way a started process makes sure it never outlives the process it
serves (stdlib only, Python >= 3.7, imports nothing of the package).

A worker left running holds TensorFlow ports, memory and a GPU forever, and a forked kernel's parent
is a template, not the process it works for. So every process the launchers start ties its life to
an owner with these tools:

- :func:`die_with_parent`: Linux's ``PR_SET_PDEATHSIG``, a signal from the kernel when the parent
  ends, however it ends (SIGKILL included). Worker kernels, the network-namespace holder, remote
  kernels (set in the child by the remote agent) and the process-group watchdog use it.
- :func:`watch_parent`: a daemon thread that notices the parent is gone (this process was
  re-parented); covers systems without prctl. Worker kernels started as fresh interpreters.
- :func:`watch_process`: a daemon thread that notices any other process is gone: a pidfd where
  the kernel has them (no polling), else a poll of ``/proc`` (a zombie counts as gone). Kernels
  forked from a template watch the process they work for, not their parent, the template.
- :func:`exit_on_hangup`: no thread, a signal when the launcher's channel closes while the process
  is busy (a remote template's imports).

Run as a program, ``python -S owner_watch.py WORKER_PID`` is the watchdog of a worker's process
group (``processes/runtime/containment.py``): it kills the group when the worker dies.

Who uses it: the local processes import it (``mwnotebook.processes.shipped.owner_watch``); the
remote agent and the remote template get its source sent with theirs
(:func:`mwnotebook.processes.shipped.bundle`), where it is the module ``owner_watch``.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
#: How often a watch without a pidfd looks again.
POLL_SECONDS = 0.5


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send ``sig`` to this process when its parent ends; True when that is set
    (Linux only). The parent may already be gone: check with :func:`watch_parent` or ``getppid``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie has: it runs no more code)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False


def open_pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it ends), or None where there are none (Linux < 5.3,
    Python < 3.9). Raises ProcessLookupError when ``pid`` is gone already."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise
    except (AttributeError, OSError):
        return None


def _start(name: str, loop: Callable[[], None]) -> None:
    threading.Thread(target=loop, name=name, daemon=True).start()


def watch_parent(parent: int, on_gone: Callable[[], object], name: str = "mwnotebook-parent-watch") -> None:
    """Call ``on_gone()`` (which ends this process) once ``parent`` is no longer this process's
    parent: now, if it is gone already, else from a daemon thread."""
    if os.getppid() != parent:  # the parent died before we could watch it
        on_gone()
        return

    def loop() -> None:
        while True:
            time.sleep(POLL_SECONDS)
            if os.getppid() != parent:
                on_gone()
                return

    _start(name, loop)


def watch_process(pid: int, on_gone: Callable[[], object], pidfd: int | None = None, open_one: bool = True,
                  name: str = "mwnotebook-owner-watch") -> None:
    """Call ``on_gone()`` (which ends this process) once process ``pid`` has ended: now, if it has,
    else from a daemon thread. ``pidfd``: one already open (say, inherited over a fork); without
    it one is opened unless ``open_one`` is False; without either, the thread polls."""
    if pidfd is None and open_one:
        try:
            pidfd = open_pidfd(pid)
        except ProcessLookupError:
            on_gone()
            return
    if pidfd is None and process_gone(pid):
        on_gone()
        return

    def loop() -> None:
        while True:
            if pidfd is not None:
                if select.select([pidfd], [], [])[0]:
                    break
            else:
                time.sleep(POLL_SECONDS)
                if process_gone(pid):
                    break
        on_gone()

    _start(name, loop)


def exit_on_hangup(fd: int, on_gone: Callable[[], object]) -> Callable[[], None]:
    """Call ``on_gone()`` (which ends this process) as soon as the other end of ``fd`` (a pipe or a
    socket this process reads) is closed, while the main thread does something else: a ``SIGIO``
    for ``fd`` (``O_ASYNC``), no thread. For a process busy for seconds (a remote template
    importing TensorFlow) that must not start threads (it forks). Data that arrives meanwhile is
    left unread. Returns the undo; a no-op where there is no ``O_ASYNC`` (not Linux)."""
    import fcntl

    if not hasattr(os, "O_ASYNC") or not hasattr(signal, "SIGIO"):
        return lambda: None
    hangup = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)

    def check(*_: object) -> None:
        poller = select.poll()
        poller.register(fd, hangup)
        if any(events & hangup for _, events in poller.poll(0)):
            on_gone()

    previous = signal.signal(signal.SIGIO, check)
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_ASYNC)
    check()  # closed already

    def undo() -> None:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
        signal.signal(signal.SIGIO, previous)

    return undo


def watch_group(worker: int) -> None:
    """The watchdog of ``worker``'s process group, a child of ``worker`` in that group: sleep
    until the worker dies (a death signal), then kill the whole group. Never returns."""
    def kill_group(*_: object) -> None:
        os.killpg(worker, signal.SIGKILL)
        os._exit(0)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)  # signals sent to the group are for the worker
    # SIGWINCH: no process group of a worker has a terminal that would send it (the same signal as
    # the shell watchdog's, processes/runtime/containment.py)
    signal.signal(signal.SIGWINCH, kill_group)
    if not die_with_parent(signal.SIGWINCH):
        os._exit(1)
    if os.getppid() != worker:
        kill_group()
    while True:
        signal.pause()


if __name__ == "__main__":
    watch_group(int(sys.argv[1]))
