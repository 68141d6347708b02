"""The life of one ``mwnotebook run``: start the workers, run the script (as ``python SCRIPT ARGS``
would: its ``sys.argv``, ``__file__``, its non-daemon threads waited for), always stop them, and turn
every ending (success, a failure, Ctrl-C, SIGTERM) into an exit status."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from mwnotebook.errors import ClusterInterrupted, ClusterRunError, MWNotebookError
from mwnotebook.frontend.cli.run_observer import SCRIPT_ORIGIN, RunObserver, describe_failure

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143

#: After the script, how long its non-daemon threads may still run (``python script.py`` waits for
#: them); their output is shown labelled ``[worker i, after the script]``.
THREADS_WAIT_SECONDS = 60.0
JOIN_THREADS_CODE = """\
import threading as _mw_threading, time as _mw_time
_mw_end = _mw_time.monotonic() + LIMIT
for _mw_thread in [t for t in _mw_threading.enumerate() if not t.daemon and t is not _mw_threading.main_thread()]:
    _mw_thread.join(max(0.0, _mw_end - _mw_time.monotonic()))
del _mw_threading, _mw_time, _mw_end
"""

def script_preamble(script: Path, args: Sequence[str]) -> str:
    """Make the cell look like ``python SCRIPT ARGS``: ``__file__``, ``sys.argv``, ``sys.path[0]``.

    Run as its own cell before the script so that traceback line numbers match the file.
    """
    path = str(script.resolve())
    return ("import sys as _mw_sys\n"
            f"_mw_sys.argv = {[path, *args]!r}\n"
            f"_mw_sys.path.insert(0, {str(script.resolve().parent)!r})\n"
            f"__file__ = {path!r}\n"
            "del _mw_sys\n")


@dataclass
class Outcome:
    status: int = EXIT_OK
    verdict: str = "all workers succeeded"
    failure_text: str = ""


class _SignalPolicy:
    """Ctrl-C / SIGTERM cancel the command's main task, which then stops every worker. While
    stopping, further signals are ignored so that no worker outlives the command.

    (An interrupt-then-wait, like the notebook's stop button, would make the core restart the group
    only for the command to stop it right after; stopping directly is faster.)"""

    def __init__(self, main: asyncio.Task[Any]) -> None:
        self.main = main
        self.stopping = False
        self.received: int | None = None

    def __call__(self, signum: int) -> None:
        if self.stopping or self.received is not None:
            return
        self.received = signum
        self.main.cancel()


async def drive(cluster: Any, code: str, preamble: str, observer: RunObserver, timeout: float | None,
                 stderr: TextIO) -> Outcome:
    """Start, run, and always stop the cluster; turn every ending into an exit status."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    policy = _SignalPolicy(main)
    handled = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, policy, sig)
            handled.append(sig)
    outcome = Outcome()
    # Start in a task of its own that a signal cannot cancel halfway: the core may be creating
    # kernels at that moment, and stop() must run after they exist, or they would outlive us.
    start = asyncio.ensure_future(cluster.start(on_event=observer))
    cluster.late_output.set_origin(SCRIPT_ORIGIN)
    cluster.late_output.listen(observer.late)
    try:
        await asyncio.shield(start)
        await cluster.run(preamble, max_restarts=0)
        started = time.monotonic()
        await cluster.run(code, on_event=observer, timeout=timeout, fresh_setup=preamble)
        # As `python script.py` does, wait for the script's threads (bounded), their output labelled.
        left = THREADS_WAIT_SECONDS if timeout is None else max(1.0, timeout - (time.monotonic() - started))
        await cluster.run(JOIN_THREADS_CODE.replace("LIMIT", repr(min(left, THREADS_WAIT_SECONDS))),
                          on_event=observer.after_script, max_restarts=0)
    except (asyncio.CancelledError, ClusterInterrupted) as exc:
        if isinstance(exc, ClusterInterrupted):
            observer.record_failures(exc)
        if policy.received is None:  # cancelled by something other than our signal handler
            raise
        terminated = policy.received == signal.SIGTERM
        outcome = Outcome(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED,
                           "terminated (SIGTERM)" if terminated else "interrupted (Ctrl-C)")
        observer.flush()
        print(f"mwnotebook: {outcome.verdict}; stopping all workers", file=stderr, flush=True)
    except ClusterRunError as exc:
        observer.flush()
        observer.record_failures(exc)
        outcome = Outcome(EXIT_FAILED, "failed", describe_failure(exc, keep_color=False))
        print(describe_failure(exc, keep_color=stderr.isatty()), file=stderr, flush=True)
    except MWNotebookError as exc:  # could not start, or a configuration problem found at start
        observer.flush()
        outcome = Outcome(EXIT_FAILED, "could not run", str(exc))
        print(f"mwnotebook: {exc}", file=stderr, flush=True)
    finally:
        policy.stopping = True
        if not start.done():
            await asyncio.wait([start], timeout=cluster.spec.startup_timeout + 30)
        if start.done() and not start.cancelled():
            start.exception()  # retrieved: it was reported above, or made moot by the signal
        try:
            # A clean run shuts the workers down politely; after a failure or a signal nothing in
            # them is worth waiting for, so they are killed at once.
            await (cluster.stop() if outcome.status == EXIT_OK else cluster.kill())
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
    return outcome
