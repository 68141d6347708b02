"""Counted, not timed: what one no-op ``Cluster.run("pass")`` calls at N workers, in both threads.

    python -m benchmarks.probes.noop_call_counts [--workers 8 32] [--cells 40] [--name noop_call_counts]

For each N (forked TF workers, one after the other, the template started first): 10 warm-up cells,
the median of ``--cells`` unprofiled cells, then ``--cells`` cells under cProfile in the caller's
thread and in the engine's event-loop thread at once. Per function: calls and seconds per cell.
Reports the functions whose calls per cell grow faster than the workers (more than N_max / N_min
times, > 1 call per cell) -- per-cell work that is super-linear in N -- and the largest per-cell
times at the largest N next to the smallest N's. Times under a profiler and under load are inflated:
read the counts, and the times only as proportions. Writes benchmarks/results/<name>/<commit>.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import time
from typing import Any

import mwnotebook
from benchmarks._suite import write_result
from mwnotebook import Cluster
from mwnotebook.engine.loop import background_loop
from mwnotebook.launchers.local.prestart import prestart_template


def _in_loop(fn: Any) -> None:
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    def call() -> None:
        fn()
        done.set_result(None)

    background_loop().loop.call_soon_threadsafe(call)
    done.result()


def measure(n: int, cells: int) -> dict[str, Any]:
    cluster = Cluster(workers=n, cpu=True)
    try:
        cluster.start()
        cluster.run("import tensorflow as tf")
        for _ in range(10):
            cluster.run("pass")
        samples = []
        for _ in range(cells):
            started = time.perf_counter()
            cluster.run("pass")
            samples.append(time.perf_counter() - started)
        caller, loop = cProfile.Profile(), cProfile.Profile()
        _in_loop(loop.enable)
        caller.enable()
        for _ in range(cells):
            cluster.run("pass")
        caller.disable()
        _in_loop(loop.disable)
    finally:
        cluster.stop()
    rows: dict[str, list[float]] = {}
    for thread, profile in (("caller", caller), ("loop", loop)):
        for (file, line, name), (_, calls, tottime, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
            rows[f"{thread}:{os.path.basename(file)}:{line}:{name}"] = [round(calls / cells, 2),
                                                                        round(1000 * tottime / cells, 4)]
    return {"workers": n, "median_ms": round(1000 * statistics.median(samples), 2), "per_cell": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs=2, default=[8, 32])
    parser.add_argument("--cells", type=int, default=40)
    parser.add_argument("--name", default="noop_call_counts")
    args = parser.parse_args()
    code = os.path.dirname(os.path.dirname(os.path.abspath(mwnotebook.__file__)))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=code).stdout.strip()
    if background_loop().run(prestart_template(), timeout=300) is None:
        raise SystemExit("no worker template could be started here")
    load_before = os.getloadavg()
    small, large = (measure(n, args.cells) for n in sorted(args.workers))
    ratio = large["workers"] / small["workers"]
    a, b = small["per_cell"], large["per_cell"]
    growing = sorted(((k, a.get(k, [0, 0])[0], v[0]) for k, v in b.items()
                      if v[0] > 1 and v[0] > 1.05 * ratio * a.get(k, [0, 0])[0]), key=lambda r: -r[2])
    top = sorted(b.items(), key=lambda kv: -kv[1][1])[:25]
    path = write_result(args.name, {
        "command": " ".join(["python", "benchmarks/noop_call_counts.py", *sys.argv[1:]]), "commit": commit,
        "code": code, "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "median_ms": {small["workers"]: small["median_ms"], large["workers"]: large["median_ms"]},
        "calls_growing_faster_than_workers": growing,
        "largest_per_cell_ms_at_large_n": [[k, v[1], a.get(k, [0, 0])[1], v[0], a.get(k, [0, 0])[0]] for k, v in top],
        "rows": {small["workers"]: a, large["workers"]: b}})
    print(f"median no-op: N={small['workers']} {small['median_ms']} ms, N={large['workers']} {large['median_ms']} ms")
    print(f"calls per cell growing more than {ratio:g}x:", growing or "none")
    for k, v in top[:12]:
        print(f"  {v[1]:8.3f} ms ({a.get(k, [0, 0])[1]:7.3f})  calls {v[0]:8.1f} ({a.get(k, [0, 0])[0]:7.1f})  {k}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
