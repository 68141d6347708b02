"""Many TensorFlow workers on one machine, forked from the worker template: start, seed, no-op, memory.

    python benchmarks/scale_workers.py [--workers 8 16 32] [--noop-repeats 30]

For each N, one after the other in this process (the template is started first and shared):

* start to ready of N workers (``Cluster.start``), the template already up;
* the seed cell (tests/data/seed_train.py) with N replicas -- every worker must print the seed's
  line with ``replicas=N`` -- and a second (warm) run of it;
* a no-op cell (``Cluster.run("pass")``, median of ``--noop-repeats``);
* the sum of the workers' PSS (``psutil`` ``memory_full_info().pss``) after the seed cell, kernels
  and each kernel's own child processes, and the template's PSS at the same moment.

PSS per extra worker is the slope between consecutive N: of the workers' sum, and of the workers'
sum plus the template's (what an extra worker costs the machine: the template's pages are counted
once in all, split among the processes sharing them, so the template's own PSS falls as N grows). Writes benchmarks/results/scale_workers.json.
Not a test: it asserts nothing except the seed's lines.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil
from _common import SEED_CODE, write_result

from mwnotebook import Cluster
from mwnotebook.engine.loop import background_loop
from mwnotebook.launchers.local.prestart import prestart_template

MIB = 2 ** 20


def pss(pid: int | None) -> tuple[int, int]:
    """(PSS of the process, PSS of its descendants) in bytes."""
    if pid is None:
        return 0, 0
    try:
        proc = psutil.Process(pid)
        own = proc.memory_full_info().pss
        kids = sum(c.memory_full_info().pss for c in proc.children(recursive=True))
        return own, kids
    except psutil.Error:
        return 0, 0


def check_seed(result: Any, n: int) -> None:
    for i in range(n):
        out = result.stdout(i)
        if not re.search(rf"worker={i} replicas={n} initial_loss=", out):
            raise RuntimeError(f"worker {i} did not print the seed's line with replicas={n}:\n{out[-2000:]}")


def measure(n: int, repeats: int, template_pid: int) -> dict[str, Any]:
    row: dict[str, Any] = {"workers": n}
    cluster = Cluster(workers=n, cpu=True)
    try:
        started = time.perf_counter()
        cluster.start()
        row["ready_s"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        result = cluster.run(SEED_CODE, timeout=900)
        row["seed_cold_s"] = round(time.perf_counter() - started, 3)
        check_seed(result, n)
        row["seed_line_worker_0"] = result.stdout(0).strip().splitlines()[-1]
        pids = [info.pid for info in cluster.status()]
        sizes = [pss(pid) for pid in pids]
        row["pss_kernels_mib"] = round(sum(s[0] for s in sizes) / MIB, 1)
        row["pss_kernel_children_mib"] = round(sum(s[1] for s in sizes) / MIB, 1)
        # The template shares its pages with the N workers: its own PSS falls as N grows, so what an
        # extra worker costs the machine is the slope of workers + template.
        row["template_pss_with_workers_mib"] = round(pss(template_pid)[0] / MIB, 1)
        started = time.perf_counter()
        result = cluster.run(SEED_CODE, timeout=900)
        row["seed_warm_s"] = round(time.perf_counter() - started, 3)
        check_seed(result, n)
        for _ in range(5):
            cluster.run("pass")
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            cluster.run("pass")
            samples.append(time.perf_counter() - started)
        row["noop_ms"] = round(1000 * statistics.median(samples), 2)
        row["threads_per_worker"] = [psutil.Process(pid).num_threads() for pid in pids[:2] if pid]
    finally:
        cluster.stop()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--noop-repeats", type=int, default=30)
    parser.add_argument("--name", default="scale_workers", help="results file name (benchmarks/results/NAME.json)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    started = time.perf_counter()
    template = background_loop().run(prestart_template(), timeout=300)
    template_ready = time.perf_counter() - started
    if template is None:
        raise SystemExit("no worker template could be started here")
    rows = []
    for n in args.workers:
        rows.append(measure(n, args.noop_repeats, template.pid))
        rows[-1]["template_pss_mib"] = round(pss(template.pid)[0] / MIB, 1)
        rows[-1]["load_average"] = os.getloadavg()
        print(rows[-1], flush=True)
    for prev, row in zip(rows, rows[1:]):
        row["pss_per_extra_worker_mib"] = round(
            (row["pss_kernels_mib"] + row["pss_kernel_children_mib"]
             - prev["pss_kernels_mib"] - prev["pss_kernel_children_mib"]) / (row["workers"] - prev["workers"]), 1)
        row["pss_per_extra_worker_with_template_mib"] = round(
            (row["pss_kernels_mib"] + row["pss_kernel_children_mib"] + row["template_pss_with_workers_mib"]
             - prev["pss_kernels_mib"] - prev["pss_kernel_children_mib"] - prev["template_pss_with_workers_mib"])
            / (row["workers"] - prev["workers"]), 1)
    by_n = {r["workers"]: r for r in rows}
    ratios = {}
    if 8 in by_n:
        ratios = {f"noop_{n}_over_8": round(r["noop_ms"] / by_n[8]["noop_ms"], 2) for n, r in by_n.items()}
    path = write_result(args.name, {
        "command": " ".join(["python", "benchmarks/scale_workers.py", *sys.argv[1:]]), "commit": commit,
        "template_ready_s": round(template_ready, 2), "load_average_before": load_before,
        "load_average_after": os.getloadavg(), "rows": rows, "ratios": ratios})
    for row in rows:
        print(f"N={row['workers']}: ready {row['ready_s']:.2f} s, seed {row['seed_cold_s']:.1f} s cold / "
              f"{row['seed_warm_s']:.1f} s warm, no-op {row['noop_ms']:.1f} ms, PSS {row['pss_kernels_mib']:.0f} + "
              f"{row['pss_kernel_children_mib']:.0f} MiB (per extra worker {row.get('pss_per_extra_worker_mib', '-')}; "
              f"with the template's share {row.get('pss_per_extra_worker_with_template_mib', '-')})")
    print(ratios)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
