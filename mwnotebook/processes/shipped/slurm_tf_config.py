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
* Worker ``SLURM_PROCID`` listens on ``MWNOTEBOOK_TF_PORT`` (default 12345) + its ``SLURM_LOCALID``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

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


def tf_config(env: dict[str, str], nodes: list[str], addresses: dict[str, str]) -> str:
    counts = expand_counts(env.get("SLURM_STEP_TASKS_PER_NODE") or env["SLURM_TASKS_PER_NODE"])
    port = int(env.get("MWNOTEBOOK_TF_PORT") or DEFAULT_PORT)
    workers = cluster_list(nodes, addresses, counts, port)
    index = int(env["SLURM_PROCID"])
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def _scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True).stdout


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: slurm_tf_config.py PROGRAM [ARGS...]  (run by srun, one task per worker)",
              file=sys.stderr)
        return 2
    env = dict(os.environ)
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodelist or "SLURM_PROCID" not in env:
        print("slurm_tf_config.py: not inside a Slurm job step (run it with srun)", file=sys.stderr)
        return 2
    nodes = [n for n in _scontrol("show", "hostnames", nodelist).split() if n]
    addresses = node_addresses(_scontrol("--oneliner", "show", "node", ",".join(nodes)))
    os.environ["TF_CONFIG"] = tf_config(env, nodes, addresses)
    os.execvp(argv[0], argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
