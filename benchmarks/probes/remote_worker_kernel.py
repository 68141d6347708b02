"""What running mwnotebook's worker kernel on remote hosts costs (processes/shipped/remote_agent.py
``has_worker_kernel``, remote_template.py ``worker_kernel``): 2 workers over SSH (test hosts in
network namespaces), fresh and forked, with the worker kernel vs plain ``ipykernel_launcher``
(``MWNOTEBOOK_REMOTE_WORKER_KERNEL=0``), alternating in one run.

Columns: "ready" (``Cluster.start()`` returning; a new cluster each run, so remote templates start
cold), "restart" (``Cluster.restart()``: kernels only, templates kept), "no-op" (median of 5 ``pass``
cells). Needs root (``ip netns``). Usage: ``python -m benchmarks.probes.remote_worker_kernel [--repeat 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from benchmarks._suite import write_result
from mwnotebook import Cluster
from testbed import netns_hosts

COLUMNS = ("ready", "restart", "no-op")
PROBE = "import os, sys\nprint('KERNEL', os.path.basename(sys.argv[0]), os.environ.get('MWNOTEBOOK_WORKER'), flush=True)"


def measure(hosts: tuple[str, ...], template: bool, worker_kernel: bool) -> tuple[float, ...]:
    env = {"MWNOTEBOOK_REMOTE_WORKER_KERNEL": "1" if worker_kernel else "0"}
    started = time.perf_counter()
    with Cluster(hosts=hosts, cpu=True, template=template, env=env) as cluster:
        cluster.start()
        ready = time.perf_counter() - started
        restarting = time.perf_counter()
        cluster.restart()
        restart = time.perf_counter() - restarting
        noops = []
        for _ in range(5):
            t = time.perf_counter()
            cluster.run("pass", timeout=60)
            noops.append(time.perf_counter() - t)
        kinds = {cluster.run(PROBE, timeout=60).stdout(i).split()[1] for i in range(2)}
    expected = "worker_kernel.py" if worker_kernel else "ipykernel_launcher"
    if not all(k.startswith(expected) for k in kinds):  # the comparison must compare what it says
        raise RuntimeError(f"expected {expected} kernels, got {kinds}")
    return ready, restart, statistics.median(noops)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    reason = netns_hosts.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    net = netns_hosts.create(2)
    net.use_as_home()
    hosts = tuple(h.alias for h in net.hosts)
    kinds = {f"{'forked' if t else 'fresh'}, {'worker kernel' if w else 'ipykernel_launcher'}": (t, w)
             for t in (True, False) for w in (True, False)}
    results: dict[str, list[tuple[float, ...]]] = {k: [] for k in kinds}
    load_before = os.getloadavg()[0]
    try:
        measure(hosts, False, True)  # warm the file cache once, not counted
        for _ in range(args.repeat):
            for kind, (template, worker_kernel) in kinds.items():
                results[kind].append(measure(hosts, template, worker_kernel))
    finally:
        net.destroy()
    load_after = os.getloadavg()[0]
    print(f"2 SSH workers, {args.repeat} runs each, alternating; median [min-max] seconds; "
          f"load average {load_before:.1f} before, {load_after:.1f} after")
    med: dict[str, list[float]] = {}
    for kind, runs in results.items():
        columns = list(zip(*runs))
        med[kind] = [statistics.median(c) for c in columns]
        cells = [f"{name} {m:.3f} [{min(c):.3f}-{max(c):.3f}]" for name, m, c in zip(COLUMNS, med[kind], columns)]
        print(f"  {kind:32s} " + "   ".join(cells))
    ratios = {}
    for mode in ("forked", "fresh"):
        on, off = med[f"{mode}, worker kernel"], med[f"{mode}, ipykernel_launcher"]
        ratios[mode] = {name: a / b for name, a, b in zip(COLUMNS, on, off)}
        print(f"  {mode}: worker kernel / ipykernel_launcher: "
              + ", ".join(f"{name} x{r:.2f}" for name, r in ratios[mode].items()))
    path = write_result("remote_worker_kernel", {
        "repeat": args.repeat, "load_before": load_before, "load_after": load_after,
        "runs": results, "median": med, "ratios": ratios})
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
