"""The ``mwnotebook`` command: run a training script on N TensorFlow workers from a terminal, or
export it as a cluster job (one launcher per worker).

``run`` drives the same machinery as ``%%mwtrain`` through the public
:class:`mwnotebook.AsyncCluster` API on its own event loop: live output labelled ``[worker i]``, the failing
worker's traceback first, and a
self-contained HTML report with per-worker loss curves at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from mwnotebook.config.options import add_cluster_arguments, add_restart_argument, seconds, spec_from_options
from mwnotebook.engine.late_output import LateItem, LateOrigin
from mwnotebook.errors import (
    ClusterInterrupted,
    ClusterRunError,
    ConfigError,
    MWNotebookError,
    render_attempts,
    render_failures,
)
from mwnotebook.frontend.cli.run_report import render_report
from mwnotebook.shared.events import Event, RunRestarted, WorkerMetrics, WorkerOutput, WorkerStateChanged
from mwnotebook.shared.run_states import RunStates

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143

DESCRIPTION = """\
Run a TensorFlow MultiWorkerMirroredStrategy script on N worker processes, each with its own
TF_CONFIG, exactly as %%mwtrain runs a notebook cell; or export it as launchers for a real cluster."""

EPILOG = """\
examples:
  mwnotebook run --workers 2 --cpu train.py
  mwnotebook run -n 4 --env DATA_DIR=/data --timeout 600 --report run.html train.py
  mwnotebook run -n 2 train.py -- --epochs 3        (arguments after -- go to the script)
  mwnotebook export --workers 2 --cpu --out job/ train.py && bash job/run-local.sh

exit status: 0 all workers succeeded, 1 a worker failed or timed out (or could not start),
2 bad usage, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM). Workers never outlive the command."""

RUN_EPILOG = """\
examples:
  mwnotebook run --workers 2 --cpu train.py
  mwnotebook run -n 2 --env BATCH=64 --timeout 300 --report report.html train.py
  mwnotebook run -n 2 train.py -- --epochs 3

The script runs as a cell in each worker kernel: TF_CONFIG is already set when it starts, so it
must not create TensorFlow ops before its MultiWorkerMirroredStrategy. Inside the script,
__file__ and sys.argv are set as for "python train.py". Output is printed live, each line
prefixed with [worker i]. If any worker fails, the others are stopped, the failing worker's
traceback is printed first and the exit status is 1. Curves in the report come from
mw.report(...) / the Keras callback; a script that reports nothing still gets a report with each
worker's status and output.

exit status: 0 success, 1 a worker failed or timed out, 2 bad usage, 130 Ctrl-C, 143 SIGTERM."""

EXPORT_EPILOG = """\
examples:
  mwnotebook export --workers 2 --cpu --out job/ train.py
  bash job/run-local.sh                      # all workers on this machine, logs in job/worker-<i>.log
  mwnotebook export --hosts gpu1,gpu2 --gpus-per-worker 1 --out job/ train.py

writes job/train.py, job/worker-0.sh ... worker-N-1.sh (TF_CONFIG='...' exec python3 train.py;
only task.index differs), job/run-local.sh and job/README.md (running on real hosts).
--python sets the interpreter the launchers exec on the hosts (default: python3).
A cell's IPython-only lines (%magic, !shell) are disabled in train.py, with a note."""


# --------------------------------------------------------------------------- argument parsing

def _ports(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ports takes comma-separated port numbers, got {text!r}") from None


def _version() -> str:
    """The installed distribution's version (read from its metadata, not from the package top)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mwnotebook")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="mwnotebook", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what mwnotebook does (to stderr)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser("run", help="run a script on N local (or --hosts) TensorFlow workers",
                              description="Run SCRIPT on every worker at once and wait for all of them.",
                              epilog=RUN_EPILOG, formatter_class=fmt)
    add_cluster_arguments(run)
    run.add_argument("--timeout", type=seconds, default=None, metavar="S",
                     help="stop all workers and fail if the script runs longer than S seconds")
    add_restart_argument(run)
    run.add_argument("--report", default=None, metavar="FILE",
                     help="HTML report to write at the end (default: SCRIPT-report.html here)")
    run.add_argument("--no-report", action="store_true", help="do not write an HTML report")
    run.add_argument("script", metavar="SCRIPT", help="the training script (Python)")
    run.add_argument("script_args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                     help="arguments for the script (its sys.argv[1:])")

    export = commands.add_parser("export", help="write a script as per-worker launchers for a cluster job",
                                 description="Write SCRIPT as a cluster job: one launcher per worker.",
                                 epilog=EXPORT_EPILOG, formatter_class=fmt)
    add_cluster_arguments(export)
    export.add_argument("--out", "-o", required=True, metavar="DIR", help="directory to write (created if missing)")
    export.add_argument("--ports", type=_ports, default=None, metavar="P0,P1,...",
                        help="TF port of each worker (default: free ports here; 12345 on --hosts)")
    export.add_argument("--format", default="launchers", choices=("launchers", "slurm", "tfjob"),
                        help="per-worker launchers (default), a Slurm batch job (job.sbatch), or a "
                             "Kubernetes TFJob manifest (tfjob.yaml)")
    export.add_argument("script", metavar="SCRIPT", help="the training script (Python)")
    return parser


# --------------------------------------------------------------------------- live output

SCRIPT_ORIGIN = LateOrigin("the script")
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

class RunObserver:
    """Event sink of the CLI: prints worker output live and keeps what the report needs.

    Called on the command's event loop; the lock only guards against a core that would call it
    from another thread.
    """

    def __init__(self, workers: int, stdout: TextIO, stderr: TextIO) -> None:
        from mwnotebook.frontend.text.relay import TextRelay
        from mwnotebook.shared.metrics import MetricsStore

        self.workers = workers
        self.relay = TextRelay(stdout, stderr, num_workers=workers)
        self.metrics = MetricsStore()
        #: Each worker's state and error, by the rule the status table follows (shared/run_states.py).
        self.run_states = RunStates(workers)
        self.output: list[list[str]] = [[] for _ in range(workers)]
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, WorkerStateChanged):
                self.run_states.apply(event)
            elif isinstance(event, WorkerMetrics):
                self.metrics.add(event.worker, event.records)
            elif isinstance(event, RunRestarted):  # --max-restarts: marked in the report and the output
                self.metrics.add_restart(event.cause, time=event.lost_at, restart_seconds=event.restart_seconds)
                self.relay(event)
            elif isinstance(event, WorkerOutput):
                self._keep(event)
                self.relay(event)

    def _keep(self, event: WorkerOutput) -> None:
        content = event.content
        if event.msg_type == "stream":
            self.output[event.worker].append(content.get("text", ""))
        elif event.msg_type in ("display_data", "execute_result"):
            text = content.get("data", {}).get("text/plain")
            if text:
                self.output[event.worker].append(text + "\n")

    def late(self, item: LateItem) -> None:
        """Output a worker sent after the script had ended (a thread), labelled so."""
        with self._lock:
            self._keep(WorkerOutput(item.worker, item.msg_type, item.content))
            self.relay.late(item.worker, item.origin.label, item.msg_type, item.content)

    def after_script(self, event: Event) -> None:
        """Events of the wait for the script's threads: their output is late output."""
        if isinstance(event, WorkerOutput):
            with self._lock:
                self._keep(event)
                self.relay.late(event.worker, SCRIPT_ORIGIN.label, event.msg_type, event.content)

    def flush(self) -> None:
        with self._lock:
            self.relay.flush()

    def record_failures(self, exc: ClusterRunError) -> None:
        """Per-worker verdicts from the run's error (the cause first in ``exc.failures``)."""
        with self._lock:
            for failure in exc.failures:
                self.run_states.record(failure.worker, "failed" if failure.kind in ("error", "died")
                                       else failure.kind, failure.headline())

    @property
    def states(self) -> list[str]:
        return self.run_states.states

    @property
    def errors(self) -> list[str]:
        return self.run_states.errors


def describe_failure(exc: ClusterRunError, keep_color: bool = False) -> str:
    """Which worker failed and its traceback first, then what happened to the others."""
    if not exc.failures:
        return f"mwnotebook: {exc}"
    attempts = [f"mwnotebook: {line}" for line in render_attempts(exc.attempts, exc.last_cause())]
    return "\n".join(attempts + render_failures(exc.failures, terminal=True, color=keep_color))


# --------------------------------------------------------------------------- commands

def _script_preamble(script: Path, args: Sequence[str]) -> str:
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
class _Outcome:
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


async def _drive(cluster: Any, code: str, preamble: str, observer: RunObserver, timeout: float | None,
                 stderr: TextIO) -> _Outcome:
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
    outcome = _Outcome()
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
        outcome = _Outcome(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED,
                           "terminated (SIGTERM)" if terminated else "interrupted (Ctrl-C)")
        observer.flush()
        print(f"mwnotebook: {outcome.verdict}; stopping all workers", file=stderr, flush=True)
    except ClusterRunError as exc:
        observer.flush()
        observer.record_failures(exc)
        outcome = _Outcome(EXIT_FAILED, "failed", describe_failure(exc, keep_color=False))
        print(describe_failure(exc, keep_color=stderr.isatty()), file=stderr, flush=True)
    except MWNotebookError as exc:  # could not start, or a configuration problem found at start
        observer.flush()
        outcome = _Outcome(EXIT_FAILED, "could not run", str(exc))
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


def _read_script(command: str, script: Path, stderr: TextIO) -> str | None:
    """The script's text, or None after saying on stderr why it cannot be read."""
    try:
        return script.read_text()
    except OSError as exc:
        print(f"mwnotebook {command}: cannot read {script}: {exc.strerror or exc}", file=stderr)
        return None


def cmd_run(ns: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    script = Path(ns.script)
    code = _read_script("run", script, stderr)
    if code is None:
        return EXIT_USAGE
    args = list(ns.script_args)
    if args and args[0] == "--":
        args = args[1:]
    spec = spec_from_options(ns)
    report = None if ns.no_report else Path(ns.report or f"{script.stem}-report.html")

    # The command owns its event loop (no background thread): signals are handled on it directly,
    # and a ClusterInterrupted never has to cross threads.
    from mwnotebook.engine.async_cluster import AsyncCluster  # keeps `--help` and `export` light

    observer = RunObserver(spec.workers, stdout, stderr)
    print(f"mwnotebook: starting {spec.workers} workers for {script}", file=stderr, flush=True)
    started = time.monotonic()
    outcome = asyncio.run(_drive(AsyncCluster(spec), code, _script_preamble(script, args), observer,
                                 ns.timeout, stderr))
    observer.flush()
    elapsed = time.monotonic() - started
    if report is not None:
        try:
            report.write_text(render_report(str(script), observer, outcome.verdict, elapsed,
                                            outcome.failure_text))
            print(f"mwnotebook: report written to {report}", file=stderr)
        except OSError as exc:
            print(f"mwnotebook: could not write the report {report}: {exc}", file=stderr)
    if outcome.status == EXIT_OK:
        print(f"mwnotebook: all {spec.workers} workers succeeded in {elapsed:.1f} s", file=stderr)
    return outcome.status


def cmd_export(ns: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from mwnotebook.export.scripts import export_cell

    script = Path(ns.script)
    code = _read_script("export", script, stderr)
    if code is None:
        return EXIT_USAGE
    if getattr(ns, "format", "launchers") != "launchers":
        from mwnotebook.export.formats import export_format

        print(export_format(code, ns.out, spec_from_options(ns), ns.format).summary(), file=stdout)
        return EXIT_OK
    job = export_cell(code, ns.out, spec_from_options(ns), ports=ns.ports)
    print(job.summary(), file=stdout)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mwnotebook`` command; returns the exit status."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if ns.verbose else logging.WARNING,
                        format="mwnotebook: %(levelname)s %(name)s: %(message)s")
    try:
        if ns.command == "run":
            return cmd_run(ns, sys.stdout, sys.stderr)
        return cmd_export(ns, sys.stdout, sys.stderr)
    except ConfigError as exc:
        parser.exit(EXIT_USAGE, f"mwnotebook {ns.command}: error: {exc}\n")
    return EXIT_USAGE  # not reached: parser.exit raises SystemExit


if __name__ == "__main__":
    sys.exit(main())
