"""Core benchmarks, measured side by side in one run.

    python -m benchmarks.probes.bench_core [--repeats 3] [--quick]

Writes benchmarks/results/core/<commit>.json and prints a markdown table. Ratios compare runs interleaved
in the same process on the same machine; absolute seconds are for context only.
"""

from __future__ import annotations

import argparse
import os
import time

import psutil

from benchmarks._suite import SEED_CODE, SEED_LINE, hand_launch_seed, median, write_result
from mwnotebook import Cluster
from mwnotebook.shared.events import WorkerOutput


def check_seed(result) -> None:
    for i in range(2):
        assert SEED_LINE.format(i=i) in result.stdout(i), result.stdout(i)


def seed_modes(repeats: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"hand_launch": [], "mwtrain_cold": [], "mwtrain_preloaded": [], "mwtrain_warm": []}
    for _ in range(repeats):
        elapsed, lines, _ = hand_launch_seed()
        assert lines == [SEED_LINE.format(i=i) for i in range(2)], lines
        times["hand_launch"].append(elapsed)

        started = time.perf_counter()
        cold = Cluster(workers=2, cpu=True)
        result = cold.run(SEED_CODE)  # starts the fresh workers, then runs the cell
        times["mwtrain_cold"].append(time.perf_counter() - started)
        check_seed(result)
        started = time.perf_counter()
        check_seed(cold.run(SEED_CODE))
        times["mwtrain_warm"].append(time.perf_counter() - started)
        cold.stop()

        warm = Cluster(workers=2, cpu=True, preload=True)
        warm.start_background()  # what %mwcluster start --preload does
        time.sleep(8)  # "had a few seconds to warm up"
        started = time.perf_counter()
        check_seed(warm.run(SEED_CODE))
        times["mwtrain_preloaded"].append(time.perf_counter() - started)
        warm.stop()
    return times


def noop_latency(ns: list[int], repeats: int) -> dict[int, float]:
    out = {}
    for n in ns:
        with Cluster(workers=n) as cluster:
            for _ in range(10):
                cluster.run("pass")
            samples = []
            for _ in range(repeats):
                started = time.perf_counter()
                cluster.run("pass")
                samples.append(time.perf_counter() - started)
            out[n] = median(samples) * 1000
    return out


def relay_latency(repeats: int) -> float:
    """Time from a worker's print to the event reaching the caller's thread (same clock)."""
    samples: list[float] = []

    def on_event(event) -> None:
        if isinstance(event, WorkerOutput) and event.msg_type == "stream" and event.content["text"].startswith("t="):
            samples.append(time.time() - float(event.content["text"][2:]))

    with Cluster(workers=2) as cluster:
        cluster.run("import time")
        for _ in range(repeats):
            cluster.run("print(f't={time.time()!r}', flush=True)\ntime.sleep(0.01)", on_event=on_event)
    return median(samples) * 1000


def start_to_ready(ns: list[int]) -> dict[int, float]:
    out = {}
    for n in ns:
        started = time.perf_counter()
        cluster = Cluster(workers=n).start()
        out[n] = time.perf_counter() - started
        cluster.stop()
    return out


FIRST_STEP = SEED_CODE.split("initial_loss = None")[0] + "\ntrain_step(distributed_iterator)\nprint('first step')\n"


def first_step(preload: bool) -> float:
    started = time.perf_counter()
    cluster = Cluster(workers=2, cpu=True, preload=preload)
    cluster.run(FIRST_STEP)
    elapsed = time.perf_counter() - started
    cluster.stop()
    return elapsed


def peak_memory() -> dict[str, float]:
    """Peak RSS (VmHWM) of a worker kernel after the seed vs a hand-launched worker process."""
    _, _, hand_peaks = hand_launch_seed()
    with Cluster(workers=2, cpu=True) as cluster:
        cluster.run(SEED_CODE)
        kernel_peaks = []
        for info in cluster.status():
            with open(f"/proc/{info.pid}/status") as fh:
                hwm = next(line for line in fh if line.startswith("VmHWM"))
            kernel_peaks.append(int(hwm.split()[1]))
    return {"hand_worker_peak_mib": max(hand_peaks) / 1024, "kernel_worker_peak_mib": max(kernel_peaks) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer samples, for a smoke run")
    args = parser.parse_args()
    lat_repeats = 20 if args.quick else 100

    seed = seed_modes(args.repeats)
    hand = median(seed["hand_launch"])
    noop = noop_latency([1, 2, 4, 8], lat_repeats)
    relay = relay_latency(lat_repeats)
    ready = start_to_ready([1, 2, 4, 8])
    first = {"without_preload": first_step(False), "with_preload_after_ready": None}
    warm = Cluster(workers=2, cpu=True, preload=True).start()
    started = time.perf_counter()
    warm.run(FIRST_STEP)
    first["with_preload_after_ready"] = time.perf_counter() - started
    warm.stop()
    memory = peak_memory()

    rows = [
        ("seed: hand launch of the two scripts", f"{hand:.2f} s", "1.00x", ""),
        ("seed: %%mwtrain on fresh workers", f"{median(seed['mwtrain_cold']):.2f} s",
         f"{median(seed['mwtrain_cold']) / hand:.2f}x", "<= 1.0x"),
        ("seed: first cell after %mwcluster start --preload", f"{median(seed['mwtrain_preloaded']):.2f} s",
         f"{median(seed['mwtrain_preloaded']) / hand:.2f}x", "<= 0.25x"),
        ("seed: warm rerun", f"{median(seed['mwtrain_warm']):.2f} s",
         f"{median(seed['mwtrain_warm']) / hand:.2f}x", "<= 0.20x"),
    ]
    rows += [(f"no-op cell, {n} warm workers (median)", f"{ms:.1f} ms", "", "<= 10 ms" if n == 8 else
              "<= 4 ms" if n == 2 else "") for n, ms in noop.items()]
    rows.append(("relay latency print -> notebook (median)", f"{relay:.1f} ms", "", "<= 20 ms"))
    rows += [(f"start to ready, {n} workers in parallel", f"{s:.2f} s", "", "") for n, s in ready.items()]
    rows.append(("time to first training step, no preload", f"{first['without_preload']:.2f} s", "", ""))
    rows.append(("time to first training step, preloaded and ready", f"{first['with_preload_after_ready']:.2f} s", "", ""))
    rows.append(("peak RSS: worker kernel vs hand-launched worker",
                 f"{memory['kernel_worker_peak_mib']:.0f} / {memory['hand_worker_peak_mib']:.0f} MiB",
                 f"{memory['kernel_worker_peak_mib'] / memory['hand_worker_peak_mib']:.2f}x", "<= 1.10x"))
    table = "| measurement | value | ratio | target |\n|---|---|---|---|\n" + "\n".join(
        f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows)
    path = write_result("core", {"seed_seconds": seed, "noop_ms": noop, "relay_ms": relay,
                                 "start_to_ready_s": ready, "first_step_s": first, "memory": memory,
                                 "table": table, "process": os.getpid(),
                                 "load_average": psutil.getloadavg()})
    print(table)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
