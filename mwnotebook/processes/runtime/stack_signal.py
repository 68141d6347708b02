"""Let the notebook see this worker's Python stacks while its main thread is blocked in native code.

``faulthandler`` dumps every thread's stack from a C signal handler, which runs even while the main
thread waits inside a TensorFlow collective (no Python code needs to run). The notebook sends
``STACKS_SIGNAL`` and reads the dump from a file next to the worker's connection file. The file
starts with a line naming the main thread's id, so the reader can put it first.
"""

from __future__ import annotations

import faulthandler
import os
import threading
from typing import IO

# one definition for the worker and the readers (the notebook, the remote agent)
from mwnotebook.processes.shipped.stack_dump import MAIN_THREAD_TAG, STACKS_SIGNAL, SUFFIX

__all__ = ["MAIN_THREAD_TAG", "STACKS_SIGNAL", "SUFFIX", "install", "stacks_path"]

_file: IO[str] | None = None


def stacks_path(connection_file: str) -> str:
    return connection_file + SUFFIX


def install(connection_file: str) -> str | None:
    """Register the dump on :data:`STACKS_SIGNAL`; returns the dump file's path (None if impossible)."""
    global _file
    if _file is not None:
        return _file.name
    path = stacks_path(connection_file)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    except OSError:
        return None
    _file = os.fdopen(fd, "w", buffering=1)
    _file.write(f"{MAIN_THREAD_TAG} 0x{threading.main_thread().ident:x}\n")
    _file.flush()
    faulthandler.register(STACKS_SIGNAL, file=_file, all_threads=True, chain=False)
    return path
