"""TensorFlow's profiler over one window of steps in this worker (``%%mwtrain --profile DIR``).

The notebook arms every worker before the cell (:func:`arm`) with the same window of steps and the
same run name, and asks each for its summary after it (:func:`finish`). Steps are counted by the
worker's step clock (``worker/_step_clock.py``): a tf_keras ``fit``'s batches (the automatic Keras
callback), or a custom loop's ``mw.report`` calls. So every worker traces the same steps, chosen by
number, not by time.

The profiler is stopped when the cell has ended (:func:`finish`), not right after step ``last``:
TensorFlow 2.21's profiler crashes a worker now and then as it stops (``free(): invalid pointer``,
SIGABRT/SIGSEGV in ``tf.profiler.experimental.stop``, in plain TensorFlow processes too: 11 of 88 stops
right after the window on an input-bound worker, 3 of 19 after the cell: docs/guide/profiling.md). Stopped after the
cell, a crash costs the profile's summary (experiments/profile.py says so in the cell's last line) but
not the training. So the trace runs from step ``first`` to the cell's end; the summary covers
``first`` to ``last``.

The profiler writes into a folder of this process's own first (TensorFlow names the trace after the
machine, the same name for every worker of one host) and the trace is then moved to
``DIR/plugins/profile/<run>/<host>.xplane.pb``, ``<host>`` being the task (``worker0``, ``chief0``),
which is where TensorBoard's profile plugin looks: one run, one host entry per worker.

The summary carries the step clock's split of every traced step (before the collective, waiting for
input, in the collective): the notebook turns the figures into the per-worker lines
(``experiments/profile.py``). One line of JSON after :data:`MARK` on stdout.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from mwnotebook.worker._roles import task_index, task_type
from mwnotebook.worker._step_clock import step_clock

log = logging.getLogger(__name__)

#: The start of the summary line :func:`finish` prints (read by experiments/profile.py).
MARK = "mwnotebook-profile: "


class ProfileWindow:
    """Starts the profiler before step ``first`` and stops it after step ``last`` (1-based, both
    traced); keeps the step clock's split of each traced step. A step clock listener."""

    def __init__(self, directory: str, run: str, host: str, first: int, last: int) -> None:
        self.directory, self.run, self.host = directory, run, host
        self.first, self.last = first, last
        self.steps = 0
        self.splits: list[dict[str, float]] = []
        self.traced: list[int] = []
        self.trace: str | None = None
        self.error = ""
        self._scratch: str | None = None
        self._lock = threading.Lock()

    # -- the step clock's listener -------------------------------------------------------------
    def step_begins(self) -> None:
        with self._lock:
            self.steps += 1
            if self.steps == self.first:
                self._start()

    def step_ended(self, split: dict[str, float]) -> None:
        with self._lock:
            if (self._scratch is not None or not self.directory) and self.first <= self.steps <= self.last:
                self.traced.append(self.steps)
                self.splits.append(dict(split))
            # Not stopped here, after step `last`: see the module docstring (the stop waits for the cell's end).

    def reported(self, split: dict[str, float]) -> None:
        """A custom loop's ``mw.report``: the end of one step and the begin of the next."""
        with self._lock:
            if self.steps == 0:
                self.steps = 1  # the first step began with the cell
        self.step_ended(split)
        self.step_begins()

    # -- the profiler ---------------------------------------------------------------------------
    def _start(self) -> None:
        if not self.directory or self._scratch is not None or self.trace is not None or self.error:
            return  # no folder: the window's split only (--profile-steps alone), no profiler
        import tensorflow as tf

        scratch = tempfile.mkdtemp(prefix="mwnotebook-profile-")
        try:
            tf.profiler.experimental.start(scratch)
        except Exception as exc:  # e.g. another profiler of the cell's own is running
            shutil.rmtree(scratch, ignore_errors=True)
            self.error = f"the profiler did not start: {type(exc).__name__}: {exc}".strip()
            log.warning("mwnotebook: %s", self.error)
            return
        self._scratch = scratch

    def _stop(self) -> None:
        scratch, self._scratch = self._scratch, None
        if scratch is None:
            return
        import tensorflow as tf

        try:
            tf.profiler.experimental.stop()
            written = sorted(Path(scratch).glob("plugins/profile/*/*.xplane.pb"))
            if not written:
                self.error = "the profiler stopped but wrote no trace"
                return
            target = Path(self.directory) / "plugins" / "profile" / self.run / f"{self.host}.xplane.pb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(written[-1]), target)
            self.trace = str(target)
        except Exception as exc:
            self.error = f"the trace could not be kept: {type(exc).__name__}: {exc}"
            log.warning("mwnotebook: %s", self.error)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def summary(self) -> dict[str, Any]:
        """Stop the profiler (the cell's training is over) and say what :func:`finish` prints: the window,
        the steps seen, the trace, the traced splits."""
        import gc

        gc.collect()  # the cell's finished iterators, and their input threads, go first
        with self._lock:
            self._stop()
            return {"host": self.host, "run": self.run, "first": self.first, "last": self.last,
                    "steps": self.steps, "traced": list(self.traced), "splits": list(self.splits),
                    "trace": self.trace, "error": self.error, "checks": _checks()}


def _checks() -> list[str]:
    """The single-device checks of mwnotebook/profiling.py that need no figures of ours (mixed precision,
    XLA), as their lines; empty where TensorFlow is not imported (nothing trained)."""
    import sys

    if "tensorflow" not in sys.modules:
        return []
    try:
        from mwnotebook.profiling import checklist

        return [str(item) for item in checklist()[1:3]]
    except Exception as exc:  # a check must never break the summary
        log.debug("checklist: %s", exc)
        return []


_WINDOW: list[ProfileWindow] = []  # at most one: the armed window of this process


def host_name() -> str:
    """This worker's host entry in TensorBoard: its task (``worker0``, ``chief0``, ``evaluator0``)."""
    kind = task_type() or "worker"
    return f"{kind}{task_index()}"


def _check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".mwnotebook-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OSError(f"--profile: this worker cannot write its trace into {folder}: {exc.strerror or exc}; "
                      "give a folder every worker can write") from None


def arm(directory: str, run: str, first: int, last: int) -> None:
    """Arm this worker for the next cell: trace steps ``first``..``last`` into ``directory`` (empty: no
    profiler, the steps' split only).

    Raises OSError naming the folder when this worker cannot write there (the cell does not run)."""
    disarm()
    if directory:
        _check_writable(Path(directory) / "plugins" / "profile" / run)
    window = ProfileWindow(directory, run, host_name(), first, last)
    _WINDOW.append(window)
    step_clock().listener = window
    if first == 1:
        with window._lock:  # noqa: SLF001 - the window's own lock, this module's class
            window._start()  # noqa: SLF001


def disarm() -> dict[str, Any] | None:
    """Stop listening and the profiler if it still runs; the last window's summary, or None."""
    clock = step_clock()
    clock.listener = None
    summary = _WINDOW.pop().summary() if _WINDOW else None
    _WINDOW.clear()
    return summary


def finish() -> None:
    """Print this worker's summary (one line after :data:`MARK`) and disarm."""
    summary = disarm() or {"error": "this worker was not armed (a fresh worker after a restart?)"}
    print(MARK + json.dumps(summary), flush=True)
