"""The cluster options shared by ``%%mwtrain``, ``%mwcluster start`` and the ``mwnotebook`` command:
one argparse definition, one translation into a :class:`ClusterSpec`. Pure."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from typing import Any

from mwnotebook.config.spec import MAX_WORKERS, MIXED_PRECISION, NETWORK_MODES, ClusterSpec
from mwnotebook.config.task_placement import parse_place
from mwnotebook.errors import ConfigError
from mwnotebook.shared.collectives import COLLECTIVES


def whole_number(text: str, *, minimum: int = 1, maximum: int | None = None, name: str = "value") -> int:
    """Parse a positive whole number with a message that says what was wrong."""
    try:
        value = int(text, 10)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {text!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and {maximum}" if maximum is not None else ""
        raise argparse.ArgumentTypeError(
            f"{name} must be between {minimum}{upper}, got {value}" if upper
            else f"{name} must be >= {minimum}, got {value}")
    return value


def worker_count(text: str) -> int:
    return whole_number(text, minimum=1, maximum=MAX_WORKERS, name="--workers")


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--timeout must be a number of seconds, got {text!r}") from None
    if not value > 0 or math.isinf(value) or math.isnan(value):
        raise argparse.ArgumentTypeError(f"--timeout must be > 0 seconds, got {text!r}")
    return value


#: The notebook-wide (and ``mwnotebook run``) default of ``--max-restarts``.
MAX_RESTARTS_ENV = "MWNOTEBOOK_MAX_RESTARTS"


def restart_count(text: str) -> int:
    return whole_number(text, minimum=0, name="--max-restarts")


def add_restart_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-restarts K`` (a per-run option: it needs no other worker processes)."""
    parser.add_argument("--max-restarts", type=restart_count, default=None, metavar="K",
                        help="when workers are lost (died, killed, frozen, host gone), start fresh ones and "
                             "run again, up to K times (resume needs BackupAndRestore or a checkpoint); "
                             f"default ${MAX_RESTARTS_ENV} or 0. Not after an error in the code, an "
                             "interrupt or --timeout")


def max_restarts_from(value: int | None, environ: Mapping[str, str]) -> int:
    """The option if given, else ``$MWNOTEBOOK_MAX_RESTARTS``, else 0 (ConfigError naming a bad value)."""
    if value is not None:
        return value
    text = environ.get(MAX_RESTARTS_ENV, "").strip()
    if not text:
        return 0
    try:
        return whole_number(text, minimum=0, name=MAX_RESTARTS_ENV)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{exc}: set it to a whole number >= 0 (or unset it)") from None


def env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--env takes KEY=VALUE, got {text!r}")
    return key, value


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that decide the cluster (and so whether a running one can be reused)."""
    parser.add_argument("--workers", "-n", type=worker_count, default=None, metavar="N",
                        help="number of TensorFlow workers (default 2; with --hosts, one per host slot)")
    parser.add_argument("--cpu", action="store_true",
                        help="hide GPUs from the workers (CUDA_VISIBLE_DEVICES=-1), as the seed does")
    parser.add_argument("--env", type=env_pair, action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment variable for every worker (repeatable)")
    parser.add_argument("--no-legacy-keras", action="store_true",
                        help="do not set TF_USE_LEGACY_KERAS=1 (it is set by default when tf_keras is "
                             "installed, because Keras 3 model.fit fails under this strategy)")
    parser.add_argument("--preload", action="store_true",
                        help="import TensorFlow in the workers as soon as they start")
    parser.add_argument("--hosts", default=None, metavar="H1,H2",
                        help="run workers on these SSH hosts (user@host:port, host*2 for two workers)")
    parser.add_argument("--workers-per-host", type=lambda t: whole_number(t, name="--workers-per-host"),
                        default=None, metavar="K", help="workers started on each host of --hosts")
    parser.add_argument("--python", default=None, metavar="PATH",
                        help="Python interpreter of the workers (default: the notebook's interpreter path, "
                             "also on remote hosts)")
    parser.add_argument("--tf-address", default=None, metavar="ADDR",
                        help="address the workers reach each other at: ADDR (one host) or host=ADDR,host2=ADDR2 "
                             "(default: the address each host was reached at)")
    parser.add_argument("--gpus-per-worker", type=lambda t: whole_number(t, name="--gpus-per-worker"),
                        default=None, metavar="K", help="give each worker K GPUs of its own")
    parser.add_argument("--collective", choices=COLLECTIVES, default="auto",
                        help="all-reduce implementation used by mw.strategy() (default auto)")
    parser.add_argument("--mixed-precision", choices=MIXED_PRECISION, default=None, nargs="?",
                        const="float16", help="set a mixed precision policy in every worker")
    parser.add_argument("--xla", action="store_true", help="turn on XLA JIT compilation in every worker")
    parser.add_argument("--network", choices=NETWORK_MODES, default="auto",
                        help="local workers' TensorFlow ports: 'private' keeps them in a network namespace "
                             "unreachable from other machines, 'host' puts them on this machine's network, "
                             "'auto' (default) is private where this machine allows it")
    parser.add_argument("--slurm", default=None, nargs="?", const="", metavar='"SALLOC ARGS"',
                        help="run workers as Slurm job steps in one allocation made with these salloc "
                             "arguments (e.g. \"-p gpu -t 01:00:00\"); alone: the allocation this notebook "
                             "runs in (SLURM_JOB_ID)")
    parser.add_argument("--slurm-job", default=None, metavar="JOBID",
                        help="run workers as job steps of this existing Slurm allocation")
    parser.add_argument("--slurm-login", default=None, metavar="HOST",
                        help="with --slurm/--slurm-job, from a machine off the cluster's network: run the "
                             "Slurm commands on this login node over SSH ([user@]host[:port] or an ssh "
                             "config alias) and reach the kernels through it")
    parser.add_argument("--ray", default=None, metavar="ADDRESS",
                        help="run the workers on a running Ray cluster: auto, HEAD_HOST:PORT or "
                             "ray://HEAD_HOST:10001 (one placement group, a bundle per worker)")
    parser.add_argument("--ray-strategy", default="SPREAD", type=str.upper, metavar="STRATEGY",
                        help="with --ray: how the workers' bundles are placed (SPREAD, the default, on "
                             "distinct nodes where it can; STRICT_SPREAD, PACK, STRICT_PACK)")
    parser.add_argument("--ray-ssh", default=None, metavar="HOST",
                        help="with --ray, from a machine off the Ray cluster's network: reach the workers "
                             "(and a ray:// address) through SSH forwards over one connection to this host, "
                             "the head ([user@]host[:port] or an ssh config alias)")
    parser.add_argument("--cpus-per-worker", type=lambda t: whole_number(t, name="--cpus-per-worker"),
                        default=None, metavar="C", help="with --ray: CPUs each worker's bundle reserves (default 1)")
    parser.add_argument("--ps", type=lambda t: whole_number(t, name="--ps"), default=0, metavar="P",
                        help="ParameterServerStrategy: start P parameter servers and --workers worker "
                             "servers; the cell runs in one coordinator kernel (tf_keras only)")
    parser.add_argument("--chief", action="store_true",
                        help="MultiWorkerMirroredStrategy with a chief: replica 0's TF_CONFIG task is "
                             "'chief' (the one that saves), the others are worker 0..N-2")
    parser.add_argument("--evaluator", action="store_true",
                        help="one more kernel beside training with the evaluator's own TF_CONFIG, never "
                             "in the training cluster; the cell runs there too (branch on "
                             "mw.task_type() == 'evaluator')")
    parser.add_argument("--place", action="append", default=[], metavar="ROLE=HOST[,HOST...]",
                        help="with --hosts or --slurm: run a role's tasks on these hosts (ROLE: coordinator, "
                             "chief, ps, evaluator; round-robin over the hosts; repeatable). Default: the "
                             "coordinator on the first host, ps from the last host back, the evaluator on the last")
    parser.add_argument("--no-template", action="store_true",
                        help="start every local worker as a fresh interpreter instead of forking it from "
                             "a process that has TensorFlow imported already (slower; same workers)")


def add_coordinator_arguments(parser: argparse.ArgumentParser) -> None:
    """``--coordinator notebook`` and ``--force``: only ``%mwcluster start`` has them (a cell magic
    or the command would have no notebook to be the coordinator)."""
    parser.add_argument("--coordinator", choices=("kernel", "notebook"), default="kernel",
                        help="with --ps: where the coordinator runs. 'kernel' (default): a kernel of its own "
                             "that runs the %%%%mwtrain cell; 'notebook': this notebook's own kernel (then "
                             "strategy = mw.ps_strategy() here). Host network only, one cluster per kernel")
    parser.add_argument("--force", action="store_true",
                        help="with --coordinator notebook: connect this kernel to a second cluster although it "
                             "connected to one before. The first cluster's gRPC server keeps listening, its "
                             "variables become invalid, and touching its old objects can crash the kernel")


def add_experiment_arguments(parser: argparse.ArgumentParser) -> None:
    """Where a run is logged besides the kernel's run history (mwnotebook/experiments/)."""
    parser.add_argument("--tensorboard", default=None, metavar="DIR",
                        help="also write the run's metrics as TensorBoard event files into DIR (one folder "
                             "per run, per worker and for the global values): tensorboard --logdir DIR")
    parser.add_argument("--mlflow", nargs="?", const="", default=None, metavar="EXPERIMENT",
                        help="also log the run as one MLflow run (all workers) to $MLFLOW_TRACKING_URI, in "
                             "EXPERIMENT (default: MLflow's active or default experiment); needs mlflow "
                             "(pip install 'mwnotebook[mlflow]')")


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    """``--profile DIR`` and ``--profile-steps A:B``: TensorFlow's profiler on every worker over the same
    steps (mwnotebook/experiments/profile.py; ``%mwprofile`` sets them for the next cells)."""
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="trace every worker with TensorFlow's profiler from the same step (--profile-steps) "
                             "to the cell's end into DIR/plugins/profile/RUN/<task>.xplane.pb (tensorboard --logdir "
                             "DIR, Profile tab: one host per worker) and end the cell with each worker's steps "
                             "split into input, compute and collective")
    parser.add_argument("--profile-steps", default=None, metavar="A:B",
                        help="the steps traced, A to B both included, counted from 1 (fit's batches or mw.report "
                             "calls; default 6:10, after the warm-up); without --profile: only their split at the "
                             "end of the cell, no TensorFlow profiler")


def spec_from_options(ns: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ClusterSpec:
    """Build the spec; raises :class:`ConfigError` naming the option that is wrong. ``environ``
    (default ``os.environ``) gives defaults of per-run options (``$MWNOTEBOOK_MAX_RESTARTS``)."""
    env: dict[str, str] = {}
    for key, value in ns.env:
        if key in env and env[key] != value:
            raise ConfigError(f"--env {key} is given twice with different values")
        env[key] = value
    hosts: tuple[str, ...] = ()
    if ns.hosts:
        hosts = tuple(h.strip() for h in ns.hosts.split(",") if h.strip())
        if not hosts:
            raise ConfigError(f"--hosts names no host: {ns.hosts!r}")
    elif ns.tf_address or (ns.workers_per_host and getattr(ns, "slurm", None) is None
                           and getattr(ns, "slurm_job", None) is None):
        raise ConfigError("--workers-per-host and --tf-address only apply together with --hosts")
    fields: dict[str, Any] = dict(
        workers=ns.workers, cpu=ns.cpu, env=env, legacy_keras=False if ns.no_legacy_keras else None,
        python=ns.python, hosts=hosts, workers_per_host=ns.workers_per_host, tf_address=ns.tf_address,
        gpus_per_worker=ns.gpus_per_worker, collective=ns.collective, mixed_precision=ns.mixed_precision,
        xla=ns.xla, preload=ns.preload, network=ns.network,
        template=not getattr(ns, "no_template", False),
        slurm=getattr(ns, "slurm", None), slurm_job=getattr(ns, "slurm_job", None),
        slurm_login=getattr(ns, "slurm_login", None),
        ray=getattr(ns, "ray", None), ray_strategy=getattr(ns, "ray_strategy", "SPREAD"),
        cpus_per_worker=getattr(ns, "cpus_per_worker", None), ray_ssh=getattr(ns, "ray_ssh", None),
        ps=getattr(ns, "ps", 0) or 0, chief=getattr(ns, "chief", False), evaluator=getattr(ns, "evaluator", False),
        coordinator=getattr(ns, "coordinator", "kernel"), force=getattr(ns, "force", False),
        place=parse_place(getattr(ns, "place", None) or []))
    if hasattr(ns, "max_restarts"):
        fields["max_restarts"] = max_restarts_from(ns.max_restarts, os.environ if environ is None else environ)
    engine = fields["slurm"] is not None or fields["slurm_job"] is not None or fields["ray"] is not None
    if engine and getattr(ns, "timeout", None):
        fields["startup_timeout"] = ns.timeout  # --timeout also bounds the wait in Slurm's queue, Ray's placement
    return ClusterSpec(**fields)

