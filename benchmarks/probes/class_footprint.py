"""The teacher's caps' figures: memory of a worker template and of a task, and what ``CPU_LIMIT``'s thread
defaults do to the seed cell on this machine.

    python -m benchmarks.probes.class_footprint [--workers 2 4] [--cpu-limit 2] [--reruns 4]
    python -m benchmarks.probes.class_footprint --alternate 6 [--workers 2 4] [--cpu-limit 2]

For each worker count, side by side in one run: a local cluster without caps and one under
``CPU_LIMIT`` (config/class_caps.py ``ClassCaps``; each task's TensorFlow and OpenMP threads default
to ``floor(CPU_LIMIT / tasks)``, at least 1). Each runs the seed cell (tests/data/seed_train.py) once
cold and ``--reruns`` times warm (median), then reports each task's ``tf_Compute`` threads (TensorFlow's
inter-op pool, named so) and thread variables, and the PSS (``/proc/PID/smaps_rollup``) of the worker
template and of each worker (with its watchdog child) after the seed cell, and their sum (each
configuration in a fresh process: one template). ``--alternate ROUNDS``: the timing only, with and
without the share side by side (both clusters alive, the seed cell run in turn). The fit of the sums without caps (template + N x task)
is what config/class_caps.py ``MEASURED`` holds (``MEM_LIMIT``'s estimate). Writes
benchmarks/results/class_footprint/<commit>.json. Not a test: it asserts only the seed's lines (2 workers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil

from benchmarks._suite import SEED_CODE, check_seed, uptime, write_result
from mwnotebook import Cluster
from mwnotebook.config.class_caps import ClassCaps

MIB = 2 ** 20
THREADS = """
import collections as _c, json as _j, os as _o
import tensorflow as _tf
_tf.linalg.matmul(_tf.ones((256, 256)), _tf.ones((256, 256))).numpy()
print(_j.dumps({"tf_Compute": sum(open(f"/proc/self/task/{t}/comm").read().strip() == "tf_Compute"
                                  for t in _o.listdir("/proc/self/task")),
                "threads": len(_o.listdir("/proc/self/task")),
                **{k: _o.environ.get(k) for k in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                                                   "OMP_NUM_THREADS")}}))
del _c, _j, _o, _tf
"""


def pss(pid: int) -> int:
    """Bytes of PSS of ``pid`` (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def with_children(pid: int) -> int:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        children = []
    return pss(pid) + sum(pss(c.pid) for c in children)


def tree_pss(root: int) -> int:
    """Bytes of PSS of every process under ``root`` (its templates, workers and their watchdogs): the
    sum counts each page once, as the server's memory limit does."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return 0
    return sum(pss(c.pid) for c in children)


def one(workers: int, caps: ClassCaps, reruns: int) -> dict[str, Any]:
    with Cluster(workers=workers, cpu=True, caps=caps) as cluster:
        started = time.perf_counter()
        result = cluster.run(SEED_CODE, timeout=600)
        cold = time.perf_counter() - started
        if workers == 2:
            check_seed(result.stdout)
        warm = []
        for _ in range(reruns):
            started = time.perf_counter()
            cluster.run(SEED_CODE, timeout=600)
            warm.append(time.perf_counter() - started)
        pids = [info.pid for info in cluster.status() if info.pid]
        template = getattr(cluster.launcher, "template", None)  # a local launcher's (launchers/local/launcher.py)
        memory = {"template_mib": round(pss(template.pid) / MIB, 1) if template is not None else None,
                  "worker_mib": [round(with_children(pid) / MIB, 1) for pid in pids],
                  "total_mib": round(tree_pss(os.getpid()) / MIB, 1)}
        threads = [json.loads(line) for line in cluster.query(THREADS, timeout=120) if line]
    return {"workers": workers, "cpu_limit": caps.cpu_limit, "thread_defaults": caps.thread_env(workers),
            "cold_s": round(cold, 2), "warm_s": [round(w, 2) for w in warm],
            "warm_median_s": round(statistics.median(warm), 2) if warm else None, **memory, "tasks": threads}


def alternate(workers: int, cpu_limit: float, rounds: int) -> dict[str, Any]:
    """The seed cell's warm time without and with the CPU share, the two clusters alive side by side and
    run in turn (ABAB...), so the machine's load weighs on both alike."""
    plain = Cluster(workers=workers, cpu=True, caps=ClassCaps())
    capped = Cluster(workers=workers, cpu=True, caps=ClassCaps(cpu_limit=cpu_limit))
    times: dict[str, list[float]] = {"default": [], "capped": []}
    try:
        for cluster in (plain, capped):
            cluster.run(SEED_CODE, timeout=600)  # cold: not counted
        for _ in range(rounds):
            for name, cluster in (("default", plain), ("capped", capped)):
                started = time.perf_counter()
                cluster.run(SEED_CODE, timeout=600)
                times[name].append(round(time.perf_counter() - started, 2))
    finally:
        plain.stop()
        capped.stop()
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {"workers": workers, "cpu_limit": cpu_limit, "threads": capped.thread_defaults, "warm_s": times,
            "median_s": medians, "capped_over_default": round(medians["capped"] / medians["default"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--cpu-limit", type=float, default=float(os.cpu_count() or 2))
    parser.add_argument("--reruns", type=int, default=4)
    parser.add_argument("--alternate", type=int, default=0, metavar="ROUNDS",
                        help="only the timing: both clusters alive, the seed cell run in turn ROUNDS times each")
    parser.add_argument("--one", type=float, nargs=2, default=None, metavar=("WORKERS", "CPU_LIMIT"),
                        help="(internal) one configuration in this process; CPU_LIMIT 0 = none")
    args = parser.parse_args()
    if args.one is not None:
        workers, cpu = int(args.one[0]), args.one[1]
        print("ROW " + json.dumps(one(workers, ClassCaps(cpu_limit=cpu or None), args.reruns)), flush=True)
        return
    if args.alternate:
        timing = [alternate(workers, args.cpu_limit, args.alternate) for workers in args.workers]
        for row in timing:
            print(json.dumps(row), flush=True)
        path = write_result("class_footprint", {"alternate": timing, "load": uptime()})
        print(f"load: {uptime()}\nwrote {path}")
        return
    rows = []
    for workers in args.workers:  # each in a process of its own: one template, nothing else sharing its pages
        for cpu in (0.0, args.cpu_limit):
            out = subprocess.run([sys.executable, "-m", "benchmarks.probes.class_footprint", "--one", str(workers),
                                  str(cpu), "--reruns", str(args.reruns)], capture_output=True, text=True, check=True)
            row = json.loads(next(line[4:] for line in out.stdout.splitlines() if line.startswith("ROW ")))
            print(json.dumps({k: v for k, v in row.items() if k != "tasks"}), flush=True)
            rows.append(row)
    fits = {}
    plain = {r["workers"]: r["total_mib"] for r in rows if r["cpu_limit"] is None}
    if len(plain) >= 2:
        (n1, t1), (n2, t2) = sorted(plain.items())[:2]
        per_task = (t2 - t1) / (n2 - n1)
        fits = {"per_task_mib": round(per_task, 1), "template_mib": round(t1 - n1 * per_task, 1)}
        print(f"footprint: template {fits['template_mib']} MiB + {fits['per_task_mib']} MiB per task")
    path = write_result("class_footprint", {"rows": rows, "fit": fits, "load": uptime()})
    print(f"load: {uptime()}\nwrote {path}")


if __name__ == "__main__":
    main()
