"""What a no-op ``%%mwtrain`` cell costs through the magic, against ``Cluster.run("pass")``.

Measured where a user meets it: a notebook kernel (jupyter_client, the same ipykernel a notebook
runs) executes, alternately and side by side,

* ``%%mwtrain --workers N --cpu`` / ``pass`` (a cell through the magic: output sinks, chart-on-first-
  metric, ``mw_result``), and
* ``mw_cluster.run("pass")`` (the Python API on the same warm cluster),

each as one cell, timed by the client from execute request to idle. Medians of ``--repeats`` pairs
for N = 2 and N = 8 workers. Target: magic <= API + 2 ms.

Usage: python benchmarks/noop_magic.py [--repeats 40] [--workers 2 8]
Writes benchmarks/results/noop_magic.json. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from jupyter_client.manager import start_new_kernel

RESULTS = Path(__file__).resolve().parent / "results" / "noop_magic.json"


def timed(kc, code: str) -> float:
    started = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=300, output_hook=lambda msg: None)
    elapsed = time.perf_counter() - started
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"{code!r} failed: {reply['content'].get('evalue')}")
    return elapsed


def measure(kc, workers: int, repeats: int) -> dict[str, float]:
    magic = f"%%mwtrain --workers {workers} --cpu\npass"
    timed(kc, magic)  # start the workers (and the security notice, once)
    timed(kc, "from mwnotebook.frontend.notebook import magics as _mw_magics\n"
              "mw_cluster = _mw_magics._magics.session.cluster")
    for _ in range(3):  # warm both paths
        timed(kc, magic)
        timed(kc, 'mw_cluster.run("pass")')
    magic_s, api_s = [], []
    for _ in range(repeats):
        magic_s.append(timed(kc, magic))
        api_s.append(timed(kc, 'mw_cluster.run("pass")'))
    return {"workers": workers, "magic_ms": 1000 * statistics.median(magic_s),
            "api_ms": 1000 * statistics.median(api_s),
            "extra_ms": 1000 * (statistics.median(magic_s) - statistics.median(api_s)),
            "median_of_pair_differences_ms": 1000 * statistics.median(m - a for m, a in zip(magic_s, api_s))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8])
    args = parser.parse_args()
    km, kc = start_new_kernel(kernel_name="python3")
    rows = []
    try:
        timed(kc, "%load_ext mwnotebook")
        time.sleep(3)  # the chart libraries are imported in the background at load time
        for n in args.workers:
            rows.append(measure(kc, n, args.repeats))
            print(json.dumps(rows[-1]))
            timed(kc, "%mwcluster stop")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(),
                                   "load_average": os.getloadavg(), "repeats": args.repeats, "rows": rows},
                                  indent=1))
    for row in rows:
        print(f"N={row['workers']}: magic {row['magic_ms']:.1f} ms, Cluster.run {row['api_ms']:.1f} ms, "
              f"extra {row['extra_ms']:+.1f} ms (median of pair differences {row['median_of_pair_differences_ms']:+.1f})")


if __name__ == "__main__":
    main()
