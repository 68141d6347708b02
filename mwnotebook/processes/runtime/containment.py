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

Not covered: a descendant that leaves the group (``start_new_session=True``, ``setsid``, a daemon).
A PID namespace would cover those too, but measured here: after ``unshare(CLONE_NEWPID)`` the
worker can no longer start threads ("can't start new thread"), and making the kernel the
namespace's init changes its pid and its signal semantics.
"""

from __future__ import annotations

import logging
import os
import sys

from mwnotebook.processes.shipped import owner_watch

log = logging.getLogger(__name__)

#: ``0`` disables containment (to measure without it).
DISABLE_ENV = "MWNOTEBOOK_CONTAIN_CHILDREN"

#: How the worker's descendants are contained: "process-group" or "none" (and why).
mode = "none"


def _start_watchdog(worker_pid: int) -> None:
    """Fork the watchdog and exec ``python -S owner_watch.py WORKER_PID`` in the child: a fresh,
    tiny process (not a copy of the worker, whose command line process listings would count as a
    second worker) that kills the worker's group when the worker dies (``owner_watch.watch_group``)."""
    program = owner_watch.__file__
    if os.fork() != 0:
        return
    try:  # the child: become the watchdog (exec keeps the pid, the parent and the process group)
        os.closerange(3, 4096)
        os.execv(sys.executable, [sys.executable, "-S", program, str(worker_pid)])
    finally:
        os._exit(1)


def install() -> str:
    """Start the watchdog; returns the mode. Call once, early, while the process has one thread."""
    global mode
    if not sys.platform.startswith("linux"):
        mode = "none (not Linux)"
    elif os.environ.get(DISABLE_ENV) == "0":
        mode = f"none ({DISABLE_ENV}=0)"
    elif os.getpgrp() != os.getpid():
        # Killing a group this process does not lead would kill whoever started it.
        mode = "none (the worker does not lead its process group)"
    else:
        _start_watchdog(os.getpid())
        mode = "process-group"
    log.debug("worker descendants contained by: %s", mode)
    return mode
