"""Flushed-output flood: 2 workers x N ``print(i, flush=True)`` through
``Cluster.run`` against two plain ipykernel kernels printing the same, read with jupyter_client,
side by side in one run. Reports seconds, lines received (negative: no idle status ever came, the
plain client gave up after 10 s of silence, which is included in its time) and the ratio.

    python -m benchmarks.probes.output_flood --lines 20000 --repeat 3
    python -m benchmarks.probes.output_flood --lines 20000 --repeat 10 --cluster-only   # the full 10-run flood

Writes benchmarks/results/output_flood/<commit>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from jupyter_client.manager import AsyncKernelManager

from benchmarks._suite import write_result

CODE = "for i in range({n}):\n    print(i, flush=True)\n"


async def _plain_once(clients: list, n: int) -> tuple[float, list[int]]:
    started = time.monotonic()

    async def one(kc) -> int:
        msg_id = kc.execute(CODE.format(n=n))
        lines = 0
        while True:
            try:  # a plain kernel can drop its idle status under a flood: give up after 10 s of silence
                msg = await asyncio.wait_for(kc.get_iopub_msg(), 10)
            except asyncio.TimeoutError:
                return -lines  # negative: the run never saw idle (it would have hung)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                lines += msg["content"]["text"].count("\n")
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return lines
    counts = await asyncio.gather(*(one(kc) for kc in clients))
    return time.monotonic() - started, list(counts)


async def plain(n: int, repeat: int) -> tuple[list[float], list[list[int]]]:
    managers = [AsyncKernelManager(kernel_name="python3") for _ in range(2)]
    await asyncio.gather(*(km.start_kernel() for km in managers))
    clients = [km.client() for km in managers]
    try:
        for kc in clients:
            kc.start_channels()
            await kc.wait_for_ready(timeout=60)
        runs = [await _plain_once(clients, n) for _ in range(repeat)]
    finally:
        for kc in clients:
            kc.stop_channels()
        await asyncio.gather(*(km.shutdown_kernel(now=True) for km in managers))
    return [r[0] for r in runs], [r[1] for r in runs]


def through_cluster(n: int, repeat: int) -> tuple[list[float], list[list[int]]]:
    from mwnotebook import Cluster

    seconds, counts = [], []
    with Cluster(workers=2, cpu=True) as cluster:
        cluster.start()
        for _ in range(repeat):
            started = time.monotonic()
            result = cluster.run(CODE.format(n=n), timeout=600)
            seconds.append(time.monotonic() - started)
            counts.append([result.stdout(i).count("\n") for i in range(2)])
    return seconds, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cluster-only", action="store_true", help="skip the plain-kernel comparison")
    args = parser.parse_args()
    plain_s, plain_counts = ([], []) if args.cluster_only else asyncio.run(plain(args.lines, args.repeat))
    mw_s, mw_counts = through_cluster(args.lines, args.repeat)
    m = statistics.median(mw_s)
    complete = sum(c == [args.lines, args.lines] for c in mw_counts)
    print(f"Cluster.run:   median {m:.2f} s {mw_s} lines {mw_counts}; {complete}/{args.repeat} runs complete")
    payload: dict = {"lines": args.lines, "repeat": args.repeat, "cluster_seconds": mw_s, "cluster_lines": mw_counts,
                     "cluster_complete_runs": complete}
    if plain_s:
        p = statistics.median(plain_s)
        print(f"plain kernels: median {p:.2f} s {plain_s} lines {plain_counts}")
        print(f"ratio Cluster.run / plain = {m / p:.2f}")
        payload.update(plain_seconds=plain_s, plain_lines=plain_counts, ratio=m / p)
    print(f"written to {write_result('output_flood', payload)}")


if __name__ == "__main__":
    main()
