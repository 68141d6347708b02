"""The Slurm batch format of a cluster with roles (``--ps``, ``--chief``, ``--evaluator``).

One ``srun`` step runs every TensorFlow task as one Slurm task. Which task each Slurm rank is comes
from the one order of mwnotebook/config/roles.py (``training_tasks``: chief, workers, ps; then the
evaluator), written into the batch script as ``MWNOTEBOOK_TF_TASKS``; the shipped launcher
(mwnotebook/processes/shipped/slurm_tf_config.py) turns it, the node list and the ports into each
task's TF_CONFIG on the node, and runs ``serve.py`` for the servers of a ``--ps`` cluster.

Pure: builds text.
"""

from __future__ import annotations

import shlex

from mwnotebook.config.roles import Task
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.task_placement import placed_by_option
from mwnotebook.config.worker_env import task_envs

#: The file (in the submit directory, shared by the nodes) where a ``--ps`` job's chief leaves its exit status.
DONE_FILE = '"$PWD/.mwnotebook-chief-${SLURM_JOB_ID:-0}.status"'


def slurm_tasks(spec: ClusterSpec) -> list[Task]:
    """The TensorFlow task of each Slurm rank, in rank order."""
    layout = spec.layout
    return [*layout.training_tasks(), *([Task("evaluator", 0)] if layout.evaluator else [])]


def placed_nodes(spec: ClusterSpec) -> dict[Task, str]:
    """The tasks ``--place`` puts on named nodes (config/task_placement.py's rule, the one there is);
    ``{}`` without ``--place``: Slurm places every task."""
    return placed_by_option(spec.layout, spec.place)


def place_variable(placed: dict[Task, str]) -> str:
    """``MWNOTEBOOK_TF_PLACE``: ``type:index=node`` per placed task (processes/shipped/slurm_tf_config.py)."""
    return " ".join(f"{t.type}:{t.index}={node}" for t, node in placed.items())


def tasks_variable(spec: ClusterSpec) -> str:
    """``MWNOTEBOOK_TF_TASKS``: ``type:index`` per rank, ``:serve`` on the tasks that only run a server."""
    servers = set(spec.layout.server_tasks())
    return " ".join(f"{t.type}:{t.index}" + (":serve" if t in servers else "") for t in slurm_tasks(spec))


def shared_env(spec: ClusterSpec, gpu_count: int) -> dict[str, str]:
    """The variables every task has alike (config/worker_env.py ``task_envs``, the one rule), for the
    batch script to export; what differs per task (TF_CONFIG, the worker index, a server's devices)
    is left out: the launcher builds TF_CONFIG, Slurm's ``--gpus-per-task`` binds the GPUs."""
    placeholders = [f"node:{port}" for port in range(len(spec.layout.training_tasks()))]
    envs = list(task_envs(spec, placeholders, environ={}, gpu_count=gpu_count).values())
    return {key: value for key, value in envs[0].items()
            if key not in ("TF_CONFIG", "MWNOTEBOOK_WORKER_INDEX") and all(e.get(key) == value for e in envs)}


def roles_step(spec: ClusterSpec, python: str, launcher: str, script: str, serve: str) -> list[str]:
    """The batch script's lines from the task map to its ``exit``: one step with every task."""
    q = shlex.quote
    layout = spec.layout
    lines = ["# Slurm rank -> TensorFlow task (chief, workers, ps; the evaluator last, outside the",
             "# training cluster). ':serve' tasks run serve.py, a TensorFlow server that joins forever.",
             f"export MWNOTEBOOK_TF_TASKS={q(tasks_variable(spec))}"]
    placed = placed_nodes(spec)
    if placed:
        lines += ["# --place: these tasks take a rank on the named node (slurm_tf_config.py swaps ranks);",
                  "# the other tasks run where Slurm's block distribution puts them.",
                  f"export MWNOTEBOOK_TF_PLACE={q(place_variable(placed))}"]
    run = [q(python), launcher]
    if layout.parameter_server:
        lines += ["# The job ends when the chief's training ends: the chief writes its exit status to this",
                  "# file, and every server task, which polls for it, stops its server and exits 0.",
                  f"export MWNOTEBOOK_TF_DONE={DONE_FILE}", 'rm -f "$MWNOTEBOOK_TF_DONE"']
        run += ["--serve", serve]
    run += [q(python), script]
    lines += ["# --distribution=block: rank r runs where slurm_tf_config.py puts task r's address;",
              "# --kill-on-bad-exit: one failed task ends the job instead of leaving the others waiting.",
              "srun --kill-on-bad-exit=1 --distribution=block " + " ".join(run), "status=$?"]
    if layout.parameter_server:
        lines += ["# The job's status is the chief's (srun's is the highest of all tasks', a killed server's too).",
                  'if [ -s "$MWNOTEBOOK_TF_DONE" ]; then status=$(cat "$MWNOTEBOOK_TF_DONE"); fi',
                  'rm -f "$MWNOTEBOOK_TF_DONE"']
    return [*lines, 'exit "$status"', ""]


def describe(spec: ClusterSpec) -> str:
    return ", ".join(t.name for t in slurm_tasks(spec))

