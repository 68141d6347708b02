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
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from mwnotebook.config.class_caps import ClassCaps
from mwnotebook.config.options import add_cluster_arguments, add_restart_argument, seconds, spec_from_options
from mwnotebook.errors import (
    ConfigError,
)
from mwnotebook.export.job import add_format_argument, export_job
from mwnotebook.frontend.cli.run_driver import EXIT_OK, EXIT_USAGE, drive, script_preamble
from mwnotebook.frontend.cli.run_observer import RunObserver
from mwnotebook.frontend.cli.run_report import render_report
from mwnotebook.shared.step_times import slow_worker_line

log = logging.getLogger(__name__)


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
    add_format_argument(export)
    export.add_argument("script", metavar="SCRIPT", help="the training script (Python)")
    return parser


# --------------------------------------------------------------------------- live output

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

    # The teacher's caps (docs/guide/caps.md), checked by the engine before anything starts:
    # ConfigError/CapExceeded go to main(). The command publishes no state file: its claim stands for
    # its cluster until the run ends.
    cluster = AsyncCluster(spec, caps=ClassCaps.from_environ(os.environ), unpublished="mwnotebook run")
    cluster.caps_check.claim()

    # The kernels that run the script: the workers, and --evaluator's kernel (labelled [evaluator]).
    observer = RunObserver(len(spec.layout.cell_tasks()), stdout, stderr, names=spec.layout.kernel_names())
    print(f"mwnotebook: starting {spec.workers} workers for {script}", file=stderr, flush=True)
    started = time.monotonic()
    try:
        outcome = asyncio.run(drive(cluster, code, script_preamble(script, args), observer, ns.timeout, stderr))
    finally:
        cluster.caps_check.release()
    observer.flush()
    elapsed = time.monotonic() - started
    slow = slow_worker_line(observer.metrics.records, spec.layout.kernel_names())  # shared/step_times.py
    if slow:
        print(slow, file=stderr)
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
    script = Path(ns.script)
    code = _read_script("export", script, stderr)
    if code is None:
        return EXIT_USAGE
    job = export_job(code, ns.out, spec_from_options(ns), ns.format, ports=ns.ports)
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
