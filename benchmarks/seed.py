"""Warm reruns of the seed cell (tests/data/seed_train.py) on the same 2 workers: median seconds.

    python benchmarks/seed_warm.py [--repeats 8]

Run it on two checkouts one after the other (or alternately) to compare; prints one JSON line and
writes benchmarks/results/seed_warm.json. Not a test: it asserts nothing except the seed's lines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from _common import SEED_CODE, SEED_LINE, write_result

from mwnotebook import Cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    samples = []
    with Cluster(workers=2, cpu=True) as cluster:
        cluster.run(SEED_CODE, timeout=600)
        for _ in range(args.repeats):
            started = time.perf_counter()
            result = cluster.run(SEED_CODE, timeout=600)
            samples.append(time.perf_counter() - started)
            for i in range(2):
                if SEED_LINE.format(i=i) not in result.stdout(i):
                    raise RuntimeError(f"worker {i} did not print the seed's line:\n{result.stdout(i)}")
    row = {"seed_warm_median_s": round(statistics.median(samples), 3), "samples_s": [round(s, 3) for s in samples],
           "load_average": os.getloadavg()}
    print(json.dumps(row))
    write_result("seed_warm", row)


if __name__ == "__main__":
    main()
