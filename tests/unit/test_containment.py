"""The process-group watchdog of mwnotebook/processes/runtime/containment.py, with real processes.

A stand-in worker (a fresh interpreter that leads its own process group, as every worker does)
installs containment, starts a grandchild, and is then ended; the grandchild must end with it.
Both watchdog programs are run: the shell one (the default) and the Python one (the fallback where
there is no /bin/sh). The notebook-level scenarios with real worker kernels are in
tests/reliability/test_grandchildren.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from testbed.processes import running, wait_gone

HANG_BOUND = 20  # seconds; generous on a loaded 2-core machine, only there so a bug can't hang the run

WORKER = textwrap.dedent("""
    import os, subprocess, sys, time
    from mwnotebook.processes.runtime import containment
    if sys.argv[1] == "python":
        containment.SHELL = "/nonexistent/sh"
    print(containment.install(), containment.watchdog, flush=True)
    grandchild = subprocess.Popen(["sleep", "1019"])
    print(grandchild.pid, flush=True)
    time.sleep(float(sys.argv[2]))
""")


def _end(worker: subprocess.Popen[str], *pids: int) -> None:
    for pid in (worker.pid, *pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    worker.wait(HANG_BOUND)
    if worker.stdout is not None:
        worker.stdout.close()


def _start(program: str, lives_s: float) -> tuple[subprocess.Popen[str], int, int]:
    """The stand-in worker, its watchdog's pid and its grandchild's pid."""
    worker = subprocess.Popen([sys.executable, "-c", WORKER, program, str(lives_s)], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    assert worker.stdout is not None
    assert worker.stdout.readline().split() == ["process-group", program]
    grandchild = int(worker.stdout.readline())
    watchdogs = [c for c in psutil.Process(worker.pid).children() if c.pid != grandchild]
    assert len(watchdogs) == 1, watchdogs
    _wait_armed(watchdogs[0].pid)
    return worker, watchdogs[0].pid, grandchild


def _signal_masks(pid: int) -> tuple[int, int]:
    """(ignored, caught) signal masks of ``pid``, from /proc/PID/status."""
    text = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
    return int(fields["SigIgn"], 16), int(fields["SigCgt"], 16)


def _wait_armed(pid: int) -> None:
    """Until the watchdog ignores the group's signals and catches its death signal (it is a copy of
    the worker, then a starting interpreter, for some milliseconds)."""
    def bit(sig: int) -> int:
        return 1 << (sig - 1)

    ignored = bit(signal.SIGINT) | bit(signal.SIGTERM) | bit(signal.SIGUSR1) | bit(signal.SIGUSR2)
    deadline = time.monotonic() + HANG_BOUND
    while time.monotonic() < deadline:
        ign, cgt = _signal_masks(pid)
        if ign & ignored == ignored and cgt & bit(signal.SIGWINCH):
            return
        time.sleep(0.01)
    raise AssertionError(f"the watchdog {pid} never set up its signals: {_signal_masks(pid)}")


@pytest.mark.parametrize("program", ["shell", "python"])
def test_a_killed_workers_grandchild_ends_with_it(program: str) -> None:
    worker, watchdog, grandchild = _start(program, 600)
    try:
        # Signals for the worker reach its whole group; the watchdog must stay.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
            os.kill(watchdog, sig)
        time.sleep(0.3)
        assert running(watchdog), "a signal meant for the worker ended the watchdog"
        assert running(grandchild)
        worker.kill()
        worker.wait(HANG_BOUND)
        assert not wait_gone(grandchild, HANG_BOUND)[0], "the grandchild outlived its SIGKILLed worker"
        assert not wait_gone(watchdog, HANG_BOUND)[0]
    finally:
        _end(worker, grandchild, watchdog)


@pytest.mark.parametrize("program", ["shell", "python"])
def test_a_grandchild_ends_when_its_worker_exits_normally(program: str) -> None:
    worker, watchdog, grandchild = _start(program, 0.5)
    try:
        assert worker.wait(HANG_BOUND) == 0
        assert not wait_gone(grandchild, HANG_BOUND)[0], "the grandchild outlived its worker's exit"
        assert not wait_gone(watchdog, HANG_BOUND)[0]
    finally:
        _end(worker, grandchild, watchdog)


EXIT_AT_ONCE = textwrap.dedent("""
    import os, subprocess, sys
    from mwnotebook.processes.runtime import containment
    if sys.argv[1] == "python":
        containment.SHELL = "/nonexistent/sh"
    grandchild = subprocess.Popen(["sleep", "1021"])
    print(grandchild.pid, flush=True)
    containment.install()
    os._exit(0)  # before the watchdog can have set itself up
""")


@pytest.mark.parametrize("program", ["shell", "python"])
def test_a_worker_that_dies_while_its_watchdog_starts_still_takes_its_grandchild(program: str) -> None:
    """The worker is gone before, while or after the watchdog arms its death signal: whichever it
    was, the watchdog's own look at its parent or the signal must end the group."""
    worker = subprocess.Popen([sys.executable, "-c", EXIT_AT_ONCE, program], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert worker.stdout is not None
    grandchild = int(worker.stdout.readline())
    try:
        assert worker.wait(HANG_BOUND) == 0
        assert not wait_gone(grandchild, HANG_BOUND)[0], "the grandchild outlived a worker that died at once"
    finally:
        _end(worker, grandchild)


def test_the_shell_watchdog_is_small() -> None:
    """Why the shell is the default (not a timing: a size, read once; the figure is in the module's
    docstring). A Python interpreter alone is several MiB of private memory."""
    worker, watchdog, grandchild = _start("shell", 600)
    try:
        proc = psutil.Process(watchdog)
        assert proc.name() in {"sh", "dash", "bash"}, proc.cmdline()
        assert proc.memory_full_info().uss < 2 * 2**20, proc.memory_full_info()
    finally:
        _end(worker, grandchild, watchdog)
