"""Where is each worker right now? Every thread's Python stack, main thread first, taken while the
worker's main thread may be blocked in native code (a TensorFlow collective).

The worker registered ``faulthandler`` on SIGUSR2 (mwnotebook/processes/runtime/stack_signal.py): a C signal
handler writes all stacks to a file beside its connection file without needing the blocked thread.
The signal and the file are on the worker's host: a local worker is asked here, a remote one (SSH,
Slurm) through its agent (the ``stacks`` command; ``launchers/remote/kernel_handle.py``); both read
the dump with ``processes/shipped/stack_dump.py``.

What TensorFlow exposes: nothing from Python about an op in flight -- no API lists pending
collectives or the peers they wait for. What can be said: a main thread whose stack is inside
TensorFlow's collective/cross-device code is in a collective, which completes only when every worker
of the group joins; workers whose main thread is *not* there are the ones it waits for.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from mwnotebook.launchers.capabilities import HasConnectionFile, TakesStacks
from mwnotebook.processes.shipped import stack_dump

if TYPE_CHECKING:
    from mwnotebook.launchers.base import KernelHandle


class StackWorker(Protocol):
    """What a stack dump needs of a worker (:class:`~mwnotebook.engine.workers.worker.Worker`, or a cell run's)."""

    handle: KernelHandle

    @property
    def index(self) -> int: ...

DUMP_TIMEOUT_SECONDS = stack_dump.DUMP_TIMEOUT_SECONDS

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
    if not await handle.is_alive():
        result.note = f"the worker process has ended ({handle.exit_description()})"
        return result
    connection_file = handle.connection_file if isinstance(handle, HasConnectionFile) else None
    if isinstance(handle, TakesStacks):  # on its host, by its agent
        text, main_ident, result.note = await handle.take_stacks(DUMP_TIMEOUT_SECONDS)
    elif connection_file and handle.pid is not None and handle.host == "localhost":
        text, main_ident, result.note = await asyncio.to_thread(
            stack_dump.take, handle.pid, connection_file + stack_dump.SUFFIX, DUMP_TIMEOUT_SECONDS)
    else:
        result.note = "this kind of worker cannot be asked for its stacks"
        return result
    if text:
        result.threads = parse_dump(text, main_ident, cell_code)
    return result


async def dump_stacks(workers: Sequence[StackWorker], cell_code: str | None = None) -> StacksReport:
    """Every worker's current stacks, taken at the same moment."""
    stacks = await asyncio.gather(*(_dump_one(w, cell_code) for w in workers))
    return StacksReport(list(stacks))

