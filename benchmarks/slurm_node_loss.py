"""``--max-restarts`` on Slurm: a worker whose kernel was SIGKILLed (it comes back on its node) vs a
worker whose node failed (``scontrol update state=down``: it comes back on the spare node of the
allocation, and every worker gets new TF addresses), the latter with the spare node's worker template
started with the cluster (the default) and without (``MWNOTEBOOK_SLURM_SPARE_TEMPLATE=0``: the
template imports TensorFlow only once a worker moves there), alternating in one run.

A three-node test Slurm (tests/_shared/slurm_cluster.py, network namespaces, root); 2 workers on
``--slurm "-N 3"`` (one spare node), a fresh cluster per trial. The cell all-reduces in a loop until
it runs in kernels that were not there when it began (their pids are in a file), so the first attempt
runs until the loss and the second finishes at once. Measured: the restart's own seconds (the loss
seen -> fresh workers ready, ``RunRestarted.restart_seconds``) and the loss -> the cell done (the
second attempt's MultiWorkerMirroredStrategy set-up and one all-reduce included).

Usage: ``python benchmarks/slurm_node_loss.py [--repeat 3]``
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests" / "remote"), str(ROOT / "tests" / "slurm")]

import slurm_cluster  # noqa: E402
from _common import write_result  # noqa: E402

from mwnotebook import Cluster  # noqa: E402
from mwnotebook.launchers.slurm.launcher import SPARE_TEMPLATE_ENV  # noqa: E402
from mwnotebook.shared.events import Event, WorkerOutput  # noqa: E402

CELL = """
import os, time
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()

@tf.function
def step():
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)

step()
print("training", flush=True)
while str(os.getpid()) in open(PIDS).read().split():
    step()
    time.sleep(0.05)
"""


KINDS = ("kernel SIGKILL", "node down", "node down, cold spare")


def trial(kind: str, slurm: slurm_cluster.SlurmCluster, pids_file: Path) -> dict[str, Any]:
    os.environ[SPARE_TEMPLATE_ENV] = "0" if kind.endswith("cold spare") else "1"
    with Cluster(slurm="-N 3", workers=2, cpu=True) as cluster:
        cluster.start()
        status = cluster.status()
        pids_file.write_text(" ".join(str(s.pid) for s in status))
        node = status[1].host
        lost_at: list[float] = []

        def observe(event: Event) -> None:
            if isinstance(event, WorkerOutput) and event.worker == 1 and not lost_at \
                    and "training" in event.content.get("text", ""):
                lost_at.append(time.perf_counter())
                if kind == "kernel SIGKILL":
                    os.kill(int(status[1].pid or 0), signal.SIGKILL)  # one pid namespace: the node's kernel
                else:
                    slurm.run("scontrol", "update", f"nodename={node}", "state=down", "reason=benchmark")

        result = cluster.run(CELL.replace("PIDS", repr(str(pids_file))), on_event=observe, timeout=300,
                             max_restarts=2)
        done = time.perf_counter() - lost_at[0]
        [restart] = result.restarts
    slurm.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    slurm.wait_idle(60)
    return {"kind": kind, "restart_s": restart.restart_seconds, "loss_to_done_s": done,
            "moved": list(restart.moved)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    reason = slurm_cluster.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    slurm = slurm_cluster.create(3)
    os.environ.update(slurm.env())
    os.environ.pop("SLURM_JOB_ID", None)
    rows: list[dict[str, Any]] = []
    load = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.repeat):
                for kind in KINDS:
                    rows.append(trial(kind, slurm, Path(tmp) / "pids"))
                    print(rows[-1], flush=True)
    finally:
        slurm.destroy()
    summary = {}
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        summary[kind] = {"restart_s": statistics.median(r["restart_s"] for r in mine),
                         "loss_to_done_s": statistics.median(r["loss_to_done_s"] for r in mine)}
    base = summary["kernel SIGKILL"]["restart_s"]
    print("median restart: " + ", ".join(f"{k} {v['restart_s']:.1f} s ({v['restart_s'] / base:.2f}x)"
                                         for k, v in summary.items()) + f"; load {load}")
    write_result("slurm_node_loss", {"rows": rows, "median": summary, "load_before": load,
                                     "load_after": os.getloadavg(), "repeat": args.repeat})
    return 0


if __name__ == "__main__":
    sys.exit(main())
