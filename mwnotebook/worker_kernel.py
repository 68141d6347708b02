"""Entry point of a worker kernel process: ``python -m mwnotebook.worker_kernel -f CONNECTION_FILE``.

It is ipykernel plus one guarantee: the worker never outlives the process that started it. Linux's
``PR_SET_PDEATHSIG`` kills it when its parent dies (even by SIGKILL), and a watch thread covers
systems without prctl. A worker left running would hold TensorFlow ports and memory forever.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PARENT_POLL_SECONDS = 0.5


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        except OSError:
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_SECONDS)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="mwnotebook-parent-watch", daemon=True).start()


def main() -> None:
    expected_parent = int(os.environ.pop("MWNOTEBOOK_PARENT_PID", os.getppid()))
    _die_with_parent(expected_parent)
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
