"""``--coordinator notebook`` vs the default coordinator kernel, side by side (1 ps + 2 worker servers):

- time from ``Cluster(...)`` to the first step done (the servers' start, the coordinator's
  connection, one scheduled step), each in a fresh process (a process can be the coordinator of one
  cluster only, and each process starts its own worker template: both modes pay the same cold start);
- steps per second of the PS tutorial-sized Keras model (benchmarks/ps_training.py's cell) with the
  coordinator in this process vs in its kernel.

The two modes alternate, one fresh child process per measurement.
Run: ``python -m benchmarks.probes.notebook_coordinator --repeats 3 --steps 400`` (benchmarks/results/notebook_coordinator/<commit>.json).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time

from benchmarks._suite import ROOT, median, printed_value, write_result
from benchmarks.probes.ps_training import FIRST_STEP, TUTORIAL_FIT

MODES = ("kernel", "notebook")


def child(mode: str, steps: int) -> dict[str, float]:
    """One measurement in this (fresh) process."""
    from mwnotebook import Cluster

    fit = TUTORIAL_FIT.replace("STEPS", str(steps))
    t0 = time.time()
    cluster = Cluster(workers=2, ps=1, cpu=True, coordinator=mode)
    try:
        cluster.start()
        ready = time.time() - t0
        if mode == "kernel":
            first = cluster.run(FIRST_STEP, timeout=300).stdout(0)
            rate = cluster.run(fit, timeout=600).stdout(0)
        else:  # the cells run here, as a notebook's ordinary cells would
            namespace: dict[str, object] = {}
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(FIRST_STEP, namespace)  # the benchmark's own cell
            first = out.getvalue()
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(fit, namespace)  # the benchmark's own cell
            rate = out.getvalue()
        return {"ready_s": ready, "to_first_step_s": printed_value(first, "first_step_at") - t0,
                "steps_per_s": printed_value(rate, "steps_per_s")}
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--child", choices=MODES, default=None)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.steps)), flush=True)
        return
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode in MODES:  # alternating, side by side
            done = subprocess.run([sys.executable, "-m", "benchmarks.probes.notebook_coordinator", "--child", mode,
                                   "--steps", str(args.steps)], cwd=ROOT, capture_output=True, text=True, timeout=900, check=True)
            line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
            runs[mode].append(json.loads(line[len("RESULT "):]))
    medians = {mode: {k: median([r[k] for r in rs]) for k in rs[0]} for mode, rs in runs.items()}
    payload = {
        "command": f"python -m benchmarks.probes.notebook_coordinator --repeats {args.repeats} --steps {args.steps}",
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "runs": runs, "median": medians,
        "ratio_notebook_over_kernel": {k: medians["notebook"][k] / medians["kernel"][k] for k in medians["kernel"]},
    }
    path = write_result("notebook_coordinator", payload)
    print(path.read_text())


if __name__ == "__main__":
    main()
