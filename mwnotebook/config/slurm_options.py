"""Slurm command lines and the parsing of their answers: pure functions, unit-tested with recorded
outputs of Slurm 22.05 (``tests/unit/test_slurm_commands.py``). The launcher
(``launchers/slurm/launcher.py``) runs them.

Why these commands:

* ``salloc --no-shell`` makes the allocation and exits once it is granted. Slurm 22.05's salloc has
  no ``--parsable``: the job id comes from its ``Granted/Pending job allocation N`` lines.
* ``srun --jobid J --nodelist NODE --overlap`` starts one job step per process on a named node of
  the allocation; ``--overlap`` lets the port holder and the kernel steps share the job's CPUs.
* ``scontrol show hostnames`` expands a compressed node list (``node[0-3]``); ``scontrol show node
  -o`` gives each node's ``NodeAddr``, the address the nodes reach each other at.
"""

from __future__ import annotations

import itertools
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mwnotebook.config.slurm_nodes import asked_nodes
from mwnotebook.errors import ConfigError

#: salloc options mwnotebook sets itself from the cluster options.
_OWN_OPTIONS = {
    "-n": "--workers", "--ntasks": "--workers", "--ntasks-per-node": "--workers-per-host",
    "--no-shell": "", "-J": "", "--job-name": "", "--gpus-per-task": "--gpus-per-worker",
}
_JOB_LINE = re.compile(r"\b(Granted|Pending) job allocation (\d+)")
_JOB_ID = re.compile(r"^\d+$")

#: Job states in which the allocation can still run steps (squeue %T).
ACTIVE_STATES = ("RUNNING", "CONFIGURING")
WAITING_STATES = ("PENDING", "REQUEUED", "RESIZING", "SUSPENDED")


def split_salloc_args(text: str) -> list[str]:
    """``--slurm "ARGS"`` as a list, rejecting the options mwnotebook sets itself."""
    try:
        args = shlex.split(text or "")
    except ValueError as exc:
        raise ConfigError(f"--slurm {text!r}: {exc}; quote it as one string, e.g. "
                          "--slurm \"-p gpu -t 01:00:00\"") from None
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in _OWN_OPTIONS or (name.startswith("-n") and not name.startswith("--") and len(name) > 2
                                    and name[2:].isdigit()):
            instead = _OWN_OPTIONS.get(name, "--workers")
            hint = f"; use {instead} instead" if instead else ""
            raise ConfigError(f"--slurm {text!r}: {name} is set by mwnotebook itself{hint}")
    return args


_NODELIST_OPTIONS = ("-w", "--nodelist")


def user_nodelist(args: Sequence[str]) -> tuple[str, str] | None:
    """``(option, value)`` of the node list in the user's salloc/sbatch arguments (``-w a,b``, ``-wa``,
    ``--nodelist=a``, ``--nodelist a``; the last one, as Slurm takes it), or None without one."""
    found: tuple[str, str] | None = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in _NODELIST_OPTIONS:
            if not eq:
                value = args[i + 1] if i + 1 < len(args) else ""
            found = (name, value)
        elif arg.startswith("-w") and len(arg) > 2:
            found = ("-w", arg[2:])
    return found


def expand_hostlist(text: str) -> list[str]:
    """Slurm's node list syntax expanded: ``a,b``, ``node[0-3,7]``, ``r[1-2]n[01-02]`` (zero padding
    kept). ConfigError for what it cannot read (a file name, unbalanced brackets, a bad range)."""
    if "/" in text:
        raise ConfigError(f"{text!r} names a file of nodes: mwnotebook cannot tell which nodes are in it; "
                          "list the nodes instead (e.g. --nodelist=node[0-3])")
    if not re.fullmatch(r"(?:[^\[\]]|\[[^\[\]]*\])*", text):
        raise ConfigError(f"node list {text!r}: unbalanced brackets")
    names: list[str] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):
        parts = re.split(r"\[([^\]]*)\]", item)  # text, range, text, range, ..., text
        choices: list[list[str]] = []
        for n, part in enumerate(parts):
            choices.append([part] if n % 2 == 0 else _expand_range(part, text))
        names += ["".join(combo) for combo in itertools.product(*choices)]
    return names


def _expand_range(body: str, text: str) -> list[str]:
    out: list[str] = []
    for piece in body.split(","):
        low, dash, high = piece.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or (dash and int(high) < int(low)):
            raise ConfigError(f"node list {text!r}: [{body}] is not a range like [0-3,7]")
        out += [str(i).zfill(len(low)) for i in range(int(low), int(high if dash else low) + 1)]
    return out


def place_node_args(args: Sequence[str], place: Mapping[str, Sequence[str]], placed: Sequence[str]) -> list[str]:
    """What the job's request (salloc here, ``#SBATCH`` lines in an export) adds so that the nodes
    ``--place`` puts tasks on (``placed``) are in the job: one node list, never two.

    - no ``--place`` node: nothing;
    - the user's ``--slurm`` has no node list: ``--nodelist=`` those nodes (Slurm's node list means
      "at least these nodes"; the others are Slurm's choice as before);
    - it has one (``-w``/``--nodelist``): nothing when it lists every ``--place`` node; otherwise a
      ConfigError before anything starts. Not merged: a user's node list often goes with ``-N`` for
      exactly those nodes, and a wider job than the one asked for is a surprise; the user decides."""
    wanted = list(dict.fromkeys(placed))
    if not wanted:
        return []
    given = user_nodelist(args)
    if given is None:
        return ["--nodelist=" + ",".join(wanted)]
    option, value = given
    try:
        listed = set(expand_hostlist(value))
    except ConfigError as exc:
        raise ConfigError(f"--slurm {option} {value}: {exc}; --place needs its nodes in the job") from None
    missing = [node for node in wanted if node not in listed]
    if missing:
        options = " ".join(f"--place {role}={','.join(nodes)}" for role, nodes in place.items()
                           if any(n in missing for n in nodes))
        them = ", ".join(missing)
        raise ConfigError(
            f"{options} puts tasks on {them}, which --slurm's {option} {value} leaves out (a job has one "
            f"node list, and the placed tasks need their node in it): add {them} to it "
            f"({option} {value},{','.join(missing)}), or drop {option} from --slurm (mwnotebook then asks "
            "Slurm for the --place nodes itself), or drop --place")
    return []


def salloc_argv(args: Sequence[str], workers: int, workers_per_host: int | None = None,
                gpus_per_worker: int | None = None, job_name: str = "mwnotebook") -> list[str]:
    """The salloc command line for ``workers`` worker tasks (one CPU each unless ``args`` say).

    ``--no-kill``: a failed node leaves the job running on the others, so its workers can restart on
    a spare node (``config/slurm_nodes.py``). At least one task per node asked for (``-N 3``), since
    salloc shrinks the node count to the task count and the spare node would be lost."""
    tasks = max(workers, asked_nodes(args) or 0)
    argv = ["salloc", "--no-shell", "--no-kill", f"--job-name={job_name}", f"--ntasks={tasks}"]
    if workers_per_host:
        argv.append(f"--ntasks-per-node={workers_per_host}")
    if gpus_per_worker:
        argv.append(f"--gpus-per-task={gpus_per_worker}")
    return argv + list(args)


def parse_salloc_line(line: str) -> tuple[str, str] | None:
    """``("granted"|"pending", job_id)`` from one line of salloc's stderr, else None."""
    match = _JOB_LINE.search(line)
    if not match:
        return None
    return match.group(1).lower(), match.group(2)


def check_job_id(value: str) -> str:
    value = str(value).strip()
    if not _JOB_ID.match(value):
        raise ConfigError(f"--slurm-job must be a numeric Slurm job id, got {value!r}")
    return value


def srun_argv(job_id: str, node: str, command: Sequence[str], gpus: int | None = None) -> list[str]:
    """One job step running ``command`` as one task on ``node`` of job ``job_id``; with ``gpus``,
    Slurm gives the task that many of the job's GPUs (and sets its CUDA_VISIBLE_DEVICES)."""
    gpu_args = [f"--gpus-per-task={gpus}"] if gpus else []
    return ["srun", f"--jobid={job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1", *gpu_args,
            "--overlap", "--quiet", "--job-name=mwnotebook-worker", *command]


def squeue_argv(job_id: str) -> list[str]:
    return ["squeue", "--noheader", f"--jobs={job_id}", "--format=%T|%r|%N"]


@dataclass(frozen=True)
class JobState:
    """One line of :func:`squeue_argv`'s output."""

    state: str  # PENDING, RUNNING, ...
    reason: str  # Resources, Priority, None, ...
    nodelist: str  # compressed, e.g. node[0-1]; empty while pending

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    def describe(self) -> str:
        reason = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        return f"{self.state}{reason}"


def parse_squeue(output: str) -> JobState | None:
    """The job's state, or None when squeue no longer knows the job."""
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0]:
            return JobState(parts[0], parts[1], parts[2])
    return None


def hostnames_argv(nodelist: str) -> list[str]:
    return ["scontrol", "show", "hostnames", nodelist]


def parse_hostnames(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip()]


def node_info_argv(nodes: Sequence[str]) -> list[str]:
    return ["scontrol", "--oneliner", "show", "node", ",".join(nodes)]


def scancel_argv(job_id: str) -> list[str]:
    return ["scancel", job_id]


def unique_job_name() -> str:
    """``mwnotebook-`` and 8 random hex digits: the name of one allocation request, by which it can be
    withdrawn before salloc has printed its job id (:func:`scancel_by_name_argv`)."""
    return f"mwnotebook-{secrets.token_hex(4)}"


def job_name_of(salloc: Sequence[str]) -> str | None:
    """The ``--job-name=`` of a salloc command line (None without one)."""
    return next((a.split("=", 1)[1] for a in salloc if a.startswith("--job-name=")), None)


def scancel_by_name_argv(job_name: str) -> list[str]:
    return ["scancel", f"--name={job_name}"]


def reaper_argv(job_id: str, silence_limit: float | None = None) -> list[str]:
    """A tiny process that cancels the job when its stdin closes (the notebook side is gone). With
    ``silence_limit`` (on a login node, reached over a connection that can die without a word) it
    also cancels after that many seconds without a line (the launcher sends one every few seconds)."""
    if silence_limit:
        shell, script = "bash", f'while read -r -t {silence_limit:g} _; do :; done; exec "$@" >/dev/null 2>&1'
    else:
        shell, script = "sh", 'read _ || true; exec "$@" >/dev/null 2>&1'
    return [shell, "-c", script, "mwnotebook-slurm-reaper", *scancel_argv(job_id)]


def place_workers(nodes: Sequence[str], workers: int, per_node: int | None = None) -> list[str]:
    """The node of each worker: ``per_node`` on each node in order, or (without it) the workers
    spread over the nodes in blocks, the first nodes taking one more when they do not divide."""
    if not nodes:
        raise ConfigError("the Slurm allocation has no nodes")
    if per_node:
        if per_node * len(nodes) < workers:
            raise ConfigError(f"{workers} workers at {per_node} per node need {-(-workers // per_node)} "
                              f"nodes; the allocation has {len(nodes)}")
        return [nodes[i // per_node] for i in range(workers)]
    base, extra = divmod(workers, len(nodes))
    placement: list[str] = []
    for i, node in enumerate(nodes):
        placement += [node] * (base + (1 if i < extra else 0))
    return placement


def check_slurm_spec(spec: Any) -> None:
    """What ``ClusterSpec`` checks for ``--slurm`` / ``--slurm-job`` before anything starts."""
    if spec.hosts:
        raise ConfigError("--slurm/--slurm-job and --hosts conflict: Slurm chooses the nodes; use one or the other")
    if spec.network == "private":
        raise ConfigError("--network private applies to local workers only; Slurm workers use the "
                          "cluster's network")
    login = spec.slurm_login
    if login is not None:
        if spec.slurm is None and spec.slurm_job is None:
            raise ConfigError("--slurm-login says where to run the Slurm commands; give --slurm \"ARGS\" "
                              "(a new allocation) or --slurm-job JOBID with it")
        from mwnotebook.config.hosts import parse_host

        if parse_host(login).slots is not None:
            raise ConfigError(f"--slurm-login {login!r}: one login host, [user@]host[:port], without *N")
    if spec.slurm is not None:
        args = split_salloc_args(spec.slurm)
        if spec.place:  # the --place nodes and a node list of the user's agree (ConfigError now, not at sbatch)
            from mwnotebook.config.task_placement import placed_by_option

            place_node_args(args, spec.place, list(placed_by_option(spec.layout, spec.place).values()))
    if spec.slurm_job is not None:
        check_job_id(spec.slurm_job)
    if spec.slurm and spec.slurm_job:
        raise ConfigError("--slurm \"ARGS\" makes a new allocation and --slurm-job uses an existing one; "
                          "give one of them")
