"""Ask a worker kernel for every thread's Python stack and read the answer back (stdlib only).

The worker registered ``faulthandler`` on :data:`STACKS_SIGNAL` (``processes/runtime/stack_signal.py``):
a C signal handler appends all stacks to a file beside its connection file, even while the main
thread is blocked in native code. The file starts with a line naming the main thread's id. One
reader for both sides: the notebook for local workers (``engine/cell/stacks.py``) and the remote agent
on a worker's host (``remote_agent.py``, the ``stacks`` command), where the file and the process are.
"""

from __future__ import annotations

import os
import signal
import time

STACKS_SIGNAL = signal.SIGUSR2
#: The dump file of a worker is its connection file's path plus this suffix.
SUFFIX = ".stacks"
MAIN_THREAD_TAG = "mwnotebook-main-thread"
DUMP_TIMEOUT_SECONDS = 3.0
#: A dump is complete once the file has not grown for this long.
SETTLE_SECONDS = 0.15
#: Never more than this much of one dump (a deep recursion in every thread).
MAX_DUMP_CHARS = 500_000


def stopped(pid: int) -> bool:
    """True when the process is stopped (SIGSTOP, a debugger): it cannot run its signal handler."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def take(pid: int, path: str, timeout: float = DUMP_TIMEOUT_SECONDS) -> tuple[str, int | None, str]:
    """Signal ``pid`` and read what it appends to its dump file ``path``: ``(text, main thread id,
    note)``; ``text`` is '' and ``note`` says why when there is no dump."""
    if stopped(pid):
        return "", None, "the worker process is stopped (SIGSTOP): it cannot answer until it is continued"
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            header = fh.readline()
        before = os.path.getsize(path)
    except OSError:
        return "", None, "this worker has no stack dump file (started without mwnotebook's worker runtime)"
    main = int(header.split()[1], 16) if header.startswith(MAIN_THREAD_TAG) else None
    try:
        os.kill(pid, STACKS_SIGNAL)
    except (ProcessLookupError, PermissionError) as exc:
        return "", main, f"the worker process cannot be signalled ({exc.strerror})"
    deadline = time.monotonic() + timeout
    size, stable_since = before, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = os.path.getsize(path)
        if now != size:
            size, stable_since = now, time.monotonic()
        elif size > before and time.monotonic() - stable_since >= SETTLE_SECONDS:
            break
    if size <= before:
        return "", main, f"no dump within {timeout:.0f} s (process stopped or not answering signals?)"
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.seek(before)
        return fh.read(MAX_DUMP_CHARS), main, ""
