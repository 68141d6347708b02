"""Memory of the workers' process-group watchdogs: the shell one (the default) against the Python one.

    python -m benchmarks.probes.watchdog_memory [--workers 8] [--rounds 2]

Each worker forks a watchdog that kills its process group when it dies
(mwnotebook/processes/runtime/containment.py). For each round, one cluster of N forked workers per
watchdog program, one after the other: the seed cell (every worker must print its line), then the sum
of the watchdogs' PSS and of the kernels' PSS (``psutil`` ``memory_full_info().pss``). Writes
benchmarks/results/watchdog_memory/<commit>.json. Not a test: it asserts nothing except the seed's lines.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import psutil

from benchmarks._suite import SEED_CODE, median, write_result
from mwnotebook import Cluster
from mwnotebook.processes.runtime.containment import WATCHDOG_ENV

MIB = 2 ** 20


def measure(program: str, n: int) -> dict[str, Any]:
    with Cluster(workers=n, cpu=True, env={WATCHDOG_ENV: program}) as cluster:
        result = cluster.run(SEED_CODE, timeout=900)
        for i in range(n):
            if not re.search(rf"worker={i} replicas={n} ", result.stdout(i)):
                raise RuntimeError(f"worker {i} did not print the seed's line:\n{result.stdout(i)[-2000:]}")
        kernels = [psutil.Process(info.pid) for info in cluster.status() if info.pid is not None]
        watchdogs = [child for kernel in kernels for child in kernel.children()]
        return {"program": program, "workers": n, "watchdogs": len(watchdogs),
                "watchdog_names": sorted({w.name() for w in watchdogs}),
                "watchdogs_pss_mib": round(sum(w.memory_full_info().pss for w in watchdogs) / MIB, 2),
                "kernels_pss_mib": round(sum(k.memory_full_info().pss for k in kernels) / MIB, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rows = []
    for round_ in range(args.rounds):
        for program in ("shell", "python"):
            row = measure(program, args.workers)
            row["round"] = round_
            rows.append(row)
            print(row, flush=True)
    summary = {}
    for program in ("shell", "python"):
        mine = [r for r in rows if r["program"] == program]
        summary[program] = {"watchdog_pss_per_worker_mib": round(median([r["watchdogs_pss_mib"] for r in mine]) / args.workers, 2),
                            "kernel_pss_per_worker_mib": round(median([r["kernels_pss_mib"] for r in mine]) / args.workers, 1)}
    print(summary)
    print(write_result("watchdog_memory", {"command": f"python -m benchmarks.probes.watchdog_memory --workers {args.workers} --rounds {args.rounds}",
                                           "rows": rows, "summary": summary}))


if __name__ == "__main__":
    main()
