"""Where the time of a no-op cell goes: the sync facade vs the async core vs raw kernel round trips.

    python benchmarks/noop_floor.py

(c) is one execute_request per worker, sent at once, waiting for each execute_reply and IOPub idle:
the floor that ipykernel itself sets. Writes benchmarks/results/noop_floor.json.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from _common import write_result

from mwnotebook import Cluster

REPEATS = 100


def main() -> None:
    out: dict[str, dict[int, float]] = {"sync_facade": {}, "async_core": {}, "raw_kernels": {}}
    for n in (1, 2, 4, 8):
        with Cluster(workers=n) as cluster:
            core, loop = cluster._core, cluster._loop
            for _ in range(10):
                cluster.run("pass")

            def timed(fn) -> float:
                samples = []
                for _ in range(REPEATS):
                    started = time.perf_counter()
                    fn()
                    samples.append(time.perf_counter() - started)
                return statistics.median(samples) * 1000

            async def core_runs() -> float:
                samples = []
                for _ in range(REPEATS):
                    started = time.perf_counter()
                    await core.run("pass")
                    samples.append(time.perf_counter() - started)
                return statistics.median(samples) * 1000

            async def raw_runs() -> float:
                samples = []
                for _ in range(REPEATS):
                    started = time.perf_counter()
                    await asyncio.gather(*(w.execute("pass", lambda _m: None) for w in core._workers))
                    samples.append(time.perf_counter() - started)
                return statistics.median(samples) * 1000

            out["sync_facade"][n] = timed(lambda: cluster.run("pass"))
            out["async_core"][n] = loop.run(core_runs())
            out["raw_kernels"][n] = loop.run(raw_runs())
    print("| workers | Cluster.run (ms) | AsyncCluster.run (ms) | raw execute round trips (ms) |")
    print("|---|---|---|---|")
    for n in (1, 2, 4, 8):
        print(f"| {n} | {out['sync_facade'][n]:.2f} | {out['async_core'][n]:.2f} | {out['raw_kernels'][n]:.2f} |")
    print(f"written to {write_result('noop_floor', {'median_ms': out})}")


if __name__ == "__main__":
    main()
