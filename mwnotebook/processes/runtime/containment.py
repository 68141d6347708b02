"""Nothing a worker cell starts outlives the worker.

Measured (tests/reliability/test_grandchildren.py, before this module):
a cell's ``subprocess.Popen(["sleep", "1000"])`` survived its worker when the
worker was ended by ``PR_SET_PDEATHSIG`` (notebook kernel SIGKILLed, or exiting): the ``sleep`` was
re-parented to pid 1 and kept running, carrying ``TF_CONFIG``. Only a kill of the worker's whole
process group (what ``%mwcluster stop`` does) took it along.

So at start (one thread, no TensorFlow yet) the worker forks a small watchdog into its own process
group. The watchdog asks the kernel for a signal when its parent, the worker, dies
(``PR_SET_PDEATHSIG``, delivered however the worker ended, SIGKILL included), and then kills the
worker's process group: every descendant that stayed in it, i.e. everything a cell starts with
``subprocess``/``os.system``/``multiprocessing`` unless it asks for a new session.

The watchdog is a POSIX shell (:data:`SHELL_WATCHDOG`), one per worker: 0.2 MiB of PSS per worker
against 4.6 MiB for ``python -S owner_watch.py`` (benchmarks/probes/watchdog_memory.py), which stays the
fallback where there is no ``/bin/sh``. The death signal is set in the forked child before it execs
the shell (it survives ``execve``). It is SIGWINCH, whose default action is to do nothing: one that arrives before the
shell has set its trap is lost rather than fatal, and the shell's own look at its parent (after the
trap is set) sees the worker gone and kills the group. The shell waits in ``read`` on a pipe whose
write end it holds itself (no ``sleep`` process, no polling).

Not covered: a descendant that leaves the group (``start_new_session=True``, ``setsid``, a daemon).
A PID namespace would cover those too, but measured here: after ``unshare(CLONE_NEWPID)`` the
worker can no longer start threads ("can't start new thread"), and making the kernel the
namespace's init changes its pid and its signal semantics.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from mwnotebook.processes.shipped import owner_watch

log = logging.getLogger(__name__)

#: ``0`` disables containment (to measure without it).
DISABLE_ENV = "MWNOTEBOOK_CONTAIN_CHILDREN"
#: ``python`` makes the watchdog the Python one even where there is a shell (to measure the two side
#: by side: benchmarks/probes/watchdog_memory.py).
WATCHDOG_ENV = "MWNOTEBOOK_WATCHDOG"

#: How the worker's descendants are contained: "process-group" or "none" (and why).
mode = "none"


#: The watchdog's program, run as ``sh -c SHELL_WATCHDOG mwnotebook-watchdog WORKER_PID``. Signals
#: sent to the worker's group are for the worker: ignored. The parent is read from /proc after the
#: trap is set, so a death before that is seen too (without /proc the group is left alone: only that
#: first millisecond goes unwatched). fd 0 is a pipe whose write end is fd 3.
SHELL_WATCHDOG = (
    "trap '' INT TERM HUP QUIT USR1 USR2; trap 'kill -KILL -$1; exit 0' WINCH; "
    "if read -r _ _ _ parent _ < /proc/$$/stat && [ \"$parent\" != \"$1\" ]; then kill -KILL -$1; fi; "
    "while :; do read -r _; done"
)
SHELL = "/bin/sh"
#: Which program watches: "shell" or "python" (set by :func:`install`).
watchdog = "none"


def _start_watchdog(worker_pid: int) -> str:
    """Fork the watchdog (a fresh, tiny process: not a copy of the worker, whose command line
    process listings would count as a second worker); returns which program it was started as (a
    shell that cannot be exec'd falls back to the Python one in the child)."""
    use_shell = os.access(SHELL, os.X_OK) and os.environ.get(WATCHDOG_ENV) != "python"
    blocker = os.pipe() if use_shell else None
    if os.fork() != 0:
        for fd in blocker or ():
            os.close(fd)
        return "python" if blocker is None else "shell"
    try:  # the child: become the watchdog (exec keeps the pid, the parent and the process group)
        if blocker is not None:
            os.dup2(blocker[0], 0)
            os.dup2(blocker[1], 3)
            os.closerange(4, 4096)
            try:
                if owner_watch.die_with_parent(signal.SIGWINCH):
                    os.execv(SHELL, ["sh", "-c", SHELL_WATCHDOG, "mwnotebook-watchdog", str(worker_pid)])
            except OSError:
                pass  # the Python watchdog below
        os.closerange(3, 4096)
        os.execv(sys.executable, [sys.executable, "-S", owner_watch.__file__, str(worker_pid)])
    finally:
        os._exit(1)


def install() -> str:
    """Start the watchdog; returns the mode. Call once, early, while the process has one thread."""
    global mode, watchdog
    if not sys.platform.startswith("linux"):
        mode = "none (not Linux)"
    elif os.environ.get(DISABLE_ENV) == "0":
        mode = f"none ({DISABLE_ENV}=0)"
    elif os.getpgrp() != os.getpid():
        # Killing a group this process does not lead would kill whoever started it.
        mode = "none (the worker does not lead its process group)"
    else:
        watchdog = _start_watchdog(os.getpid())
        mode = "process-group"
    log.debug("worker descendants contained by: %s (watchdog: %s)", mode, watchdog)
    return mode
