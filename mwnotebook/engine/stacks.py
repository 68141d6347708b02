"""Where is each worker right now? Every thread's Python stack, main thread first, taken while the
worker's main thread may be blocked in native code (a TensorFlow collective).

The worker registered ``faulthandler`` on SIGUSR2 (mwnotebook/processes/runtime/stack_signal.py): a C signal
handler writes all stacks to a file beside its connection file without needing the blocked thread.
Only local workers can be asked this way (the file and the signal are on this machine).

What TensorFlow exposes: nothing from Python about an op in flight -- no API lists pending
collectives or the peers they wait for. What can be said: a main thread whose stack is inside
TensorFlow's collective/cross-device code is in a collective, which completes only when every worker
of the group joins; workers whose main thread is *not* there are the ones it waits for.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from mwnotebook.launchers.capabilities import HasConnectionFile

if TYPE_CHECKING:
    from mwnotebook.launchers.base import KernelHandle


class StackWorker(Protocol):
    """What a stack dump needs of a worker (:class:`~mwnotebook.engine.connection.Worker`, or a cell run's)."""

    handle: KernelHandle

    @property
    def index(self) -> int: ...

STACKS_SIGNAL = signal.SIGUSR2
SUFFIX = ".stacks"  # mwnotebook/processes/runtime/stack_signal.py
MAIN_THREAD_TAG = "mwnotebook-main-thread"
DUMP_TIMEOUT_SECONDS = 3.0

_THREAD_RE = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.M)
_FRAME_RE = re.compile(r'File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>\S+)')
_CELL_FILE_RE = re.compile(r"(ipykernel_\d+/\d+\.py|<ipython-input-)")
_COLLECTIVE_RE = re.compile(r"collective|all_reduce|all_gather|cross_device|broadcast|batch_reduce", re.I)


@dataclass
class ThreadStack:
    ident: int
    main: bool
    frames: list[str] = field(default_factory=list)  # most recent call first


@dataclass
class WorkerStacks:
    worker: int
    host: str
    pid: int | None
    threads: list[ThreadStack] = field(default_factory=list)
    note: str = ""  # why there is no dump, if there is none

    @property
    def main(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.main), None)

    @property
    def collective_frame(self) -> str | None:
        """The innermost main-thread frame in TensorFlow's collective code, if any."""
        main = self.main
        if main is None:
            return None
        return next((f for f in main.frames if "tensorflow" in f and _COLLECTIVE_RE.search(f)), None)


@dataclass
class StacksReport:
    workers: list[WorkerStacks]

    def text(self) -> str:
        lines: list[str] = []
        in_collective = [w.worker for w in self.workers if w.collective_frame]
        others = [w.worker for w in self.workers if w.threads and not w.collective_frame]
        for w in self.workers:
            lines.append(f"--- worker {w.worker} ({w.host}, pid {w.pid}) ---")
            if not w.threads:
                lines.append(f"  no stacks: {w.note}")
                continue
            frame = w.collective_frame
            if frame:
                waits = [i for i in others] or "none (all are in collectives: check their order)"
                lines.append(f"  main thread is inside a TensorFlow collective ({frame.strip()}); it completes "
                             f"only when every worker joins it; workers not in a collective now: {waits}")
            for thread in w.threads:
                lines.append(f"  {'main thread' if thread.main else 'thread'} 0x{thread.ident:x} "
                             "(most recent call first):")
                lines.extend(f"    {f}" for f in thread.frames)
        if in_collective and others:
            lines.insert(0, f"workers {in_collective} wait in a collective for workers {others}")
        return "\n".join(lines)

    __str__ = text


def parse_dump(text: str, main_ident: int | None, cell_code: str | None = None) -> list[ThreadStack]:
    """faulthandler's text -> threads, main thread first; cell lines get their source from ``cell_code``."""
    cell_lines = cell_code.splitlines() if cell_code else []
    while cell_lines and not cell_lines[0].strip():  # IPython drops leading blank lines of a cell
        cell_lines.pop(0)
    threads: list[ThreadStack] = []
    starts = list(_THREAD_RE.finditer(text))
    for n, match in enumerate(starts):
        block = text[match.end(): starts[n + 1].start() if n + 1 < len(starts) else len(text)]
        ident = int(match.group(2), 16)
        frames: list[str] = []
        for frame in _FRAME_RE.finditer(block):
            desc = frame.group(0)
            line = int(frame.group("line"))
            if _CELL_FILE_RE.search(frame.group("file")):
                if 0 < line <= len(cell_lines):
                    desc += f": {cell_lines[line - 1].strip()}"
                frames.append(desc)
                frames.append("(IPython and ipykernel frames below the cell left out)")
                break
            frames.append(desc)
        threads.append(ThreadStack(ident, ident == main_ident, frames))
    threads.sort(key=lambda t: not t.main)
    return threads


async def _dump_one(worker: StackWorker, cell_code: str | None) -> WorkerStacks:
    handle = worker.handle
    result = WorkerStacks(worker.index, handle.host, handle.pid)
    connection_file = handle.connection_file if isinstance(handle, HasConnectionFile) else None
    if handle.host != "localhost" or not connection_file or handle.pid is None:
        result.note = "only local workers can be asked for stacks"
        return result
    if not await handle.is_alive():
        result.note = f"the worker process has ended ({handle.exit_description()})"
        return result
    if _is_stopped(handle.pid):
        result.note = "the worker process is stopped (SIGSTOP): it cannot answer until it is continued"
        return result
    path = connection_file + SUFFIX
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            header = fh.readline()
        before = os.path.getsize(path)
    except OSError:
        result.note = "this worker has no stack dump file (started without mwnotebook's worker runtime)"
        return result
    main_ident = int(header.split()[1], 16) if header.startswith(MAIN_THREAD_TAG) else None
    os.kill(handle.pid, STACKS_SIGNAL)
    deadline = time.monotonic() + DUMP_TIMEOUT_SECONDS
    size, stable_since = before, time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        now = os.path.getsize(path)
        if now != size:
            size, stable_since = now, time.monotonic()
        elif size > before and time.monotonic() - stable_since >= 0.15:
            break
    if size <= before:
        result.note = f"no dump within {DUMP_TIMEOUT_SECONDS:.0f} s (process stopped or not answering signals?)"
        return result
    with open(path, encoding="utf-8", errors="replace") as fh:
        fh.seek(before)
        text = fh.read()
    result.threads = parse_dump(text, main_ident, cell_code)
    return result


def _is_stopped(pid: int) -> bool:
    try:
        import psutil

        return bool(psutil.Process(pid).status() == psutil.STATUS_STOPPED)
    except Exception:
        return False


async def dump_stacks(workers: Sequence[StackWorker], cell_code: str | None = None) -> StacksReport:
    """Every worker's current stacks, taken at the same moment."""
    stacks = await asyncio.gather(*(_dump_one(w, cell_code) for w in workers))
    return StacksReport(list(stacks))

