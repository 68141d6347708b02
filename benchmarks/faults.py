"""Faults a run survives: restarts under chaos, a lost Slurm node, and warm reruns soaked for hangs.

    python -m benchmarks.faults chaos [--repeats 2] [--seed N]
    python -m benchmarks.faults node-loss [--repeat 3]
    python -m benchmarks.faults soak [--cell seed|fit] [--count 200] [--timeout 60]

``chaos`` -- ``--max-restarts``: a preempted training run against an undisturbed one, side by side.
For each training cell (the tf_keras ``fit`` with ``BackupAndRestore`` and the seed's custom loop
with a ``CheckpointManager``, both from testbed/chaos.py), on one two-worker cluster:
(1) fresh start: the group restarted by hand, then the undisturbed cell: seconds from the restart to
its first trained batch; (2) undisturbed: its final metrics; (3) chaos: the same cell with 3
SIGKILLs at random moments (alternating workers, the second during the restart the first caused),
``max_restarts=5``: its final metrics, every restart's seconds from the loss to fresh workers (the
engine's ``restart_seconds``) and from each kill until the next attempt trained its first batch.

``node-loss`` -- ``--max-restarts`` on Slurm: a worker whose kernel was SIGKILLed (it comes back on
its node) vs a worker whose node failed (``scontrol update state=down``: it comes back on the spare
node of the allocation, every worker gets new TF addresses), the latter with the spare node's worker
template started with the cluster (the default) and without (``MWNOTEBOOK_SLURM_SPARE_TEMPLATE=0``),
alternating. A three-node test Slurm (testbed/slurm_cluster.py, network namespaces, root); 2
workers on ``--slurm "-N 3"``, a fresh cluster per trial. The cell all-reduces in a loop until it runs
in kernels that were not there when it began, so the first attempt runs until the loss and the second
finishes at once. Measured: the restart's own seconds (``RunRestarted.restart_seconds``) and the loss
-> the cell done.

``soak`` -- one cell run again and again on the same two warm workers, each run under a timeout:
identical results, hangs (timeout) and aborts (any other failure) counted.
``MWNOTEBOOK_COLLECTIVE_KEY_SPACING=0`` in the environment turns the workers' fresh-key-base patch
off (the state before mwnotebook/processes/runtime/collective_keys.py). The suite's smaller CI
counts and their arithmetic are in tests/reliability/test_rerun_soak.py.

Writes benchmarks/results/faults/<commit>.json.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._suite import ROOT, SEED_CODE, Run, median
from mwnotebook import Cluster
from mwnotebook.errors import ClusterRunError, ClusterTimeoutError
from mwnotebook.launchers.slurm.launcher import SPARE_TEMPLATE_ENV
from mwnotebook.shared.events import Event, WorkerMetrics, WorkerOutput
from testbed import slurm_cluster
from testbed.chaos import Killer, final_line, fit_cell, loop_cell, random_plan

CHAOS_CELLS = {"fit": (fit_cell, 64), "custom loop": (loop_cell, 8)}


def fresh_start_to_training(cluster: Cluster, cell: str) -> tuple[float, str]:
    """Restart the group by hand, run ``cell``: seconds from the restart to its first batch."""
    first: list[float] = []

    def watch(event: Event) -> None:
        if isinstance(event, WorkerMetrics) and not first and event.records:
            first.append(min(r["time"] for r in event.records))

    began = time.time()
    cluster.restart()
    result = cluster.run(cell, on_event=watch, timeout=600)
    return round(first[0] - began, 2), final_line(result.stdout(0))


def chaos_run(cluster: Cluster, cell: str, steps: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    killer = Killer(cluster, random_plan(rng, steps), rng)
    result = cluster.run(cell, on_event=killer, timeout=600, max_restarts=5)
    return {"seed": seed, "final": [final_line(result.stdout(i)) for i in range(2)],
            "kills": [(k.worker, k.when) for k in killer.kills],
            "restart_seconds": [round(r.restart_seconds, 2) for r in result.restarts],
            "kill_to_training_seconds": killer.kill_to_training(),
            "restart_lines": [r.summary() for r in result.restarts],
            "marks": len(killer.store.restart_marks())}



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


#: A tf_keras ``fit`` cell that rebuilds its strategy and model every run; small, deterministic.
FIT_CODE = (ROOT / "tests" / "data" / "fit_rebuild.py").read_text()

SOAK_CELLS = {"seed": SEED_CODE, "fit": FIT_CODE}


def soak(cell: str, count: int, timeout: float, progress: bool = False) -> dict:
    """Run ``cell`` ``count`` times on one warm 2-worker cluster; the counts and the distinct outputs."""
    code = SOAK_CELLS[cell]
    counts: collections.Counter[str] = collections.Counter()
    outputs: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    seconds: list[float] = []
    with Cluster(workers=2, cpu=True) as cluster:
        cluster.start()
        for n in range(count):
            started = time.monotonic()
            failed_before = len(failures)
            try:
                result = cluster.run(code, timeout=timeout)
            except ClusterTimeoutError as exc:
                counts["hang"] += 1
                failures.append(f"run {n}: hang: {exc}")
            except ClusterRunError as exc:
                counts["abort"] += 1
                failures.append(f"run {n}: {type(exc).__name__}: {str(exc)[:300]}")
            else:
                out = result.stdout(0).strip().splitlines()[-1:] + result.stdout(1).strip().splitlines()[-1:]
                outputs[" | ".join(out)] += 1
                counts["ok"] += 1
            seconds.append(time.monotonic() - started)
            if progress and len(failures) > failed_before:
                print(failures[-1], flush=True)  # with the workers' stacks on a timeout
                failures[-1] = failures[-1][:3000]
            if progress:
                print(n, dict(counts), f"{seconds[-1]:.2f}s", flush=True)
    return {"cell": cell, "count": count, "timeout": timeout, "counts": dict(counts),
            "distinct_outputs": dict(outputs), "failures": failures,
            "median_s": sorted(seconds)[len(seconds) // 2] if seconds else None}




def chaos(repeats: int, seed: int) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in CHAOS_CELLS}
    with Cluster(workers=2, cpu=True) as cluster, tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            for name, (make, steps) in CHAOS_CELLS.items():
                base = f"{tmp}/{name.replace(' ', '-')}-{repeat}"
                fresh, _ = fresh_start_to_training(cluster, make(f"{base}-fresh"))
                undisturbed = cluster.run(make(f"{base}-calm"), timeout=600)
                row = {"fresh_start_to_training_seconds": fresh,
                       "undisturbed_final": [final_line(undisturbed.stdout(i)) for i in range(2)],
                       **chaos_run(cluster, make(f"{base}-chaos"), steps, seed + repeat)}
                row["identical"] = row["final"] == row["undisturbed_final"]
                rows[name].append(row)
                print(name, repeat, row, flush=True)
    summary = {name: {"identical": all(r["identical"] for r in runs),
                      "median_restart_seconds": median([s for r in runs for s in r["restart_seconds"]]),
                      "median_kill_to_training_seconds": median([s for r in runs for s in r["kill_to_training_seconds"]]),
                      "median_fresh_start_to_training_seconds": median([r["fresh_start_to_training_seconds"]
                                                                        for r in runs])}
               for name, runs in rows.items()}
    print(summary)
    return {"seed": seed, "summary": summary, "runs": rows}


def node_loss(repeat: int) -> dict[str, Any]:
    slurm = slurm_cluster.create(3)
    os.environ.update(slurm.env())
    os.environ.pop("SLURM_JOB_ID", None)
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(repeat):
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
                                         for k, v in summary.items()))
    return {"rows": rows, "median": summary}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("chaos", "node-loss", "soak"))
    parser.add_argument("--repeats", "--repeat", type=int, default=None, help="chaos: 2, node-loss: 3")
    parser.add_argument("--seed", type=int, default=None, help="chaos: the first random seed (default: random)")
    parser.add_argument("--cell", choices=sorted(SOAK_CELLS), default="seed", help="soak: the cell")
    parser.add_argument("--count", type=int, default=200, help="soak: runs")
    parser.add_argument("--timeout", type=float, default=60.0, help="soak: seconds per run")
    args = parser.parse_args()
    if args.part == "node-loss" and (reason := slurm_cluster.unavailable_reason()):
        print(f"cannot run here: {reason}")
        return 1
    run = Run("faults")
    ok = True
    if args.part == "chaos":
        seed = args.seed if args.seed is not None else random.randrange(1_000_000)
        results = {"chaos": chaos(args.repeats or 2, seed)}
    elif args.part == "node-loss":
        results = {"node_loss": node_loss(args.repeats or 3)}
    else:
        results = {"soak": soak(args.cell, args.count, args.timeout, progress=True)}
        print(results["soak"]["counts"], results["soak"]["distinct_outputs"])
        ok = results["soak"]["counts"].get("ok") == args.count
    print(f"written to {run.write(results)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
