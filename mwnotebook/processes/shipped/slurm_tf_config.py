"""Build TF_CONFIG from Slurm's variables, then run the training script (stdlib only, Python >= 3.7,
no mwnotebook needed on the cluster: it is copied into the exported job).

``--export DIR --format slurm`` copies this file next to the batch script; every task of
``srun python3 slurm_tf_config.py python3 train.py`` runs it. Not TensorFlow's
``SlurmClusterResolver``: with TF 2.21 that fails on CPU-only nodes (it runs ``nvidia-smi``) and
listens on port 8888 by default, Jupyter's port.

* The nodes: ``SLURM_JOB_NODELIST`` (or the step's ``SLURM_STEP_NODELIST``) expanded with
  ``scontrol show hostnames``, each node's address from ``scontrol show node`` (``NodeAddr``, which is
  the node name itself unless the cluster says otherwise).
* Tasks per node: ``SLURM_STEP_TASKS_PER_NODE`` / ``SLURM_TASKS_PER_NODE`` (``2(x3),1``). Slurm's
  default block distribution puts tasks 0..k-1 on the first node, and so on.
* Task ``SLURM_PROCID`` listens on ``MWNOTEBOOK_TF_PORT`` (default 12345) + its index on its node
  (``SLURM_LOCALID``), so tasks sharing a node never share a port.

Roles (``--ps``, ``--chief``, ``--evaluator``): the batch script sets ``MWNOTEBOOK_TF_TASKS``, the
TensorFlow task of each Slurm rank in rank order (``chief:0 worker:0:serve worker:1:serve ps:0:serve``),
written at export time from mwnotebook/config/roles.py's one order (chief, workers, ps; the evaluator
last). ``:serve`` tasks run ``--serve SCRIPT`` (a TensorFlow server) instead of the program. The
evaluator's TF_CONFIG names only itself: it is not in the training cluster.

``--place`` with node names (``MWNOTEBOOK_TF_PLACE="ps:0=mwnode1"``, written at export time): each
named task takes a rank on its node, swapped with a rank there whose task is not placed (every task
computes the same swap from the same variables, so all agree); the other tasks stay where Slurm's
block distribution puts them.

Ending a ``--ps`` job (``MWNOTEBOOK_TF_DONE=FILE``, in the shared submit directory): the servers never
end by themselves, so the chief runs the program as a child, writes its exit status to FILE when it
ends, and exits with it; each server task polls for FILE, then stops its server and exits 0. The step
then ends by itself, with the chief's status (the batch script exits with FILE's content). A server
that fails ends the step through ``srun --kill-on-bad-exit``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

DEFAULT_PORT = 12345


def expand_counts(text: str) -> list[int]:
    """``2(x3),1`` -> ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise ValueError(f"unexpected tasks-per-node value {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def node_addresses(scontrol_output: str) -> dict[str, str]:
    """``{NodeName: NodeAddr}`` from ``scontrol --oneliner show node``."""
    result = {}
    for line in scontrol_output.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "NodeName" in fields:
            result[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    return result


def cluster_list(nodes: list[str], addresses: dict[str, str], counts: list[int], port: int) -> list[str]:
    """``addr:port`` of every task in SLURM_PROCID order (block distribution)."""
    if len(counts) != len(nodes):
        raise ValueError(f"{len(nodes)} nodes but tasks per node for {len(counts)}")
    workers = []
    for node, count in zip(nodes, counts):
        address = addresses.get(node, node)
        host = f"[{address}]" if ":" in address else address
        workers += [f"{host}:{port + local}" for local in range(count)]
    return workers


def parse_tasks(text: str) -> list[tuple[str, int, bool]]:
    """``"chief:0 worker:0:serve"`` -> ``[("chief", 0, False), ("worker", 0, True)]`` (one per rank)."""
    tasks = []
    for item in text.split():
        match = re.fullmatch(r"(chief|worker|ps|evaluator):(\d+)(:serve)?", item)
        if not match:
            raise ValueError(f"MWNOTEBOOK_TF_TASKS: unexpected task {item!r} (want TYPE:INDEX[:serve])")
        tasks.append((match.group(1), int(match.group(2)), bool(match.group(3))))
    return tasks


def parse_place(text: str) -> dict[tuple[str, int], str]:
    """``"ps:0=mwnode1 chief:0=mwnode0"`` -> ``{("ps", 0): "mwnode1", ...}``."""
    place = {}
    for item in text.split():
        match = re.fullmatch(r"(chief|worker|ps|evaluator):(\d+)=(\S+)", item)
        if not match:
            raise ValueError(f"MWNOTEBOOK_TF_PLACE: unexpected item {item!r} (want TYPE:INDEX=NODE)")
        place[(match.group(1), int(match.group(2)))] = match.group(3)
    return place


def rank_nodes(nodes: list[str], counts: list[int]) -> list[str]:
    """The node of every rank (block distribution)."""
    return [node for node, count in zip(nodes, counts) for _ in range(count)]


def placed_ranks(tasks: list[tuple[str, int, bool]], ranks: list[str],
                 place: dict[tuple[str, int], str]) -> list[tuple[str, int, bool]]:
    """``tasks`` (rank order) with each placed task swapped onto a rank of its node."""
    order = list(tasks)
    for (kind, index), node in place.items():
        r = next(i for i, t in enumerate(order) if t[:2] == (kind, index))
        if ranks[r] == node:
            continue
        free = [i for i, t in enumerate(order) if ranks[i] == node and place.get(t[:2]) != node]
        if not free:
            raise ValueError(f"--place puts {kind}-{index} on {node}, but the job step has no free task "
                             f"there (its tasks' nodes: {' '.join(ranks)}); submit with {node} in the job "
                             "and tasks enough on it")
        order[r], order[free[0]] = order[free[0]], order[r]
    return order


def role_config(tasks: list[tuple[str, int, bool]], addresses: list[str], rank: int) -> dict[str, Any]:
    """TF_CONFIG of Slurm rank ``rank``: ``tasks`` and ``addresses`` are both in rank order."""
    if len(tasks) != len(addresses):
        raise ValueError(f"the job step has {len(addresses)} tasks but MWNOTEBOOK_TF_TASKS names "
                         f"{len(tasks)}: submit job.sbatch unchanged (its --ntasks matches the tasks)")
    kind, index, _ = tasks[rank]
    if kind == "evaluator":
        return {"cluster": {"evaluator": [addresses[rank]]}, "task": {"type": kind, "index": index}}
    by_index: dict[str, dict[int, str]] = {}
    for (other, number, _), address in zip(tasks, addresses):
        if other != "evaluator":
            by_index.setdefault(other, {})[number] = address
    cluster = {other: [found[i] for i in sorted(found)] for other, found in by_index.items()}
    return {"cluster": cluster, "task": {"type": kind, "index": index}}


def rank_tasks(env: dict[str, str], nodes: list[str]) -> list[tuple[str, int, bool]]:
    """The TensorFlow task of every rank (``MWNOTEBOOK_TF_TASKS``, ``--place`` applied)."""
    tasks = parse_tasks(env["MWNOTEBOOK_TF_TASKS"])
    place = parse_place(env.get("MWNOTEBOOK_TF_PLACE", ""))
    if not place:
        return tasks
    counts = expand_counts(env.get("SLURM_STEP_TASKS_PER_NODE") or env["SLURM_TASKS_PER_NODE"])
    return placed_ranks(tasks, rank_nodes(nodes, counts), place)


def tf_config(env: dict[str, str], nodes: list[str], addresses: dict[str, str]) -> str:
    counts = expand_counts(env.get("SLURM_STEP_TASKS_PER_NODE") or env["SLURM_TASKS_PER_NODE"])
    port = int(env.get("MWNOTEBOOK_TF_PORT") or DEFAULT_PORT)
    workers = cluster_list(nodes, addresses, counts, port)
    index = int(env["SLURM_PROCID"])
    if env.get("MWNOTEBOOK_TF_TASKS"):
        return json.dumps(role_config(rank_tasks(env, nodes), workers, index))
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def run_chief(argv: list[str], done: str) -> int:
    """Run the training program; write its exit status to ``done`` (the servers' signal to stop)."""
    status = subprocess.call(argv)
    if status < 0:  # killed by a signal: the shell's convention
        status = 128 - status
    partial = f"{done}.{os.getpid()}"
    with open(partial, "w") as out:
        out.write(f"{status}\n")
    os.replace(partial, done)  # whole or not at all: a server never reads half a file
    return status


def serve_until_done(argv: list[str], done: str, poll: float = 0.2) -> int:
    """Run a TensorFlow server until ``done`` appears (then stop it: 0) or it ends by itself (its status)."""
    server = subprocess.Popen(argv)
    while server.poll() is None:
        if os.path.exists(done):
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            return 0
        time.sleep(poll)
    return server.returncode


def _scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True).stdout


def main(argv: list[str]) -> int:
    serve = None
    if argv[:1] == ["--serve"] and len(argv) > 1:
        serve, argv = argv[1], argv[2:]
    if not argv:
        print("usage: slurm_tf_config.py [--serve SCRIPT] PROGRAM [ARGS...]  (run by srun, one task "
              "per TensorFlow task)", file=sys.stderr)
        return 2
    env = dict(os.environ)
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodelist or "SLURM_PROCID" not in env:
        print("slurm_tf_config.py: not inside a Slurm job step (run it with srun)", file=sys.stderr)
        return 2
    nodes = [n for n in _scontrol("show", "hostnames", nodelist).split() if n]
    addresses = node_addresses(_scontrol("--oneliner", "show", "node", ",".join(nodes)))
    os.environ["TF_CONFIG"] = tf_config(env, nodes, addresses)
    if env.get("MWNOTEBOOK_TF_TASKS"):
        kind, _, serves = rank_tasks(env, nodes)[int(env["SLURM_PROCID"])]
        done = env.get("MWNOTEBOOK_TF_DONE")
        if serves:
            if not serve:
                print("slurm_tf_config.py: a :serve task needs --serve SCRIPT", file=sys.stderr)
                return 2
            program = [argv[0], serve]
            return serve_until_done(program, done) if done else subprocess.call(program)
        if kind == "chief" and done:
            return run_chief(argv, done)
    os.execvp(argv[0], argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
