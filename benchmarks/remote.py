"""Remote workers (two sshd test hosts in network namespaces) with and without their hosts' worker
templates, and local workers for reference: time to ready, to the end of the first seed cell, of a
restart, and from a failed cell to the next cell's first instruction.

All kinds are measured side by side in one run, alternating, so that ratios are fair on a busy
machine. Each run makes a new cluster, so a new launcher: remote templates start cold (they import
TensorFlow and tf_keras while the ports are reserved), local ones are shared by the process (warm
after the first run). "ready" is ``Cluster.start()`` returning; "first seed" adds the seed cell
(tests/data/seed_train.py, checked for its exact lines); "restart" is ``Cluster.restart()``;
"recovery" is a cell failing on worker 1 (tests/data/fail_on_worker1.py; the group restarts in the
background) until the next cell's first instruction runs on both workers (wall clocks of one machine).

Needs root (``ip netns``). Usage: ``python benchmarks/remote_ready.py [--repeat 2]``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "remote")]

import netns_hosts  # noqa: E402

from mwnotebook import Cluster, ClusterRunError  # noqa: E402
from tests._shared.seed_cell import SEED_CELL, expected_line  # noqa: E402

FAIL_CELL = (ROOT / "tests" / "data" / "fail_on_worker1.py").read_text(encoding="utf-8")
FIRST_INSTRUCTION = "import time\nprint('FIRST', time.time(), flush=True)"
COLUMNS = ("ready", "first seed", "restart", "recovery")


def measure(make: Callable[[], Cluster]) -> tuple[float, ...]:
    started = time.perf_counter()
    with make() as cluster:
        cluster.start()
        ready = time.perf_counter() - started
        seed = cluster.run(SEED_CELL, timeout=600)
        first_seed = time.perf_counter() - started
        if [expected_line(i) in seed.stdout(i).splitlines() for i in range(2)] != [True, True]:
            raise RuntimeError(f"the seed's lines are missing: {seed.stdout(0)[-500:]} {seed.stdout(1)[-500:]}")
        restarting = time.perf_counter()
        cluster.restart()
        restart = time.perf_counter() - restarting
        try:
            cluster.run(FAIL_CELL, timeout=300)
            raise RuntimeError("the failing cell did not fail")
        except ClusterRunError:
            failed_at = time.time()
        result = cluster.run(FIRST_INSTRUCTION, timeout=300)
        firsts = [float(m) for i in range(2) for m in re.findall(r"FIRST ([\d.]+)", result.stdout(i))]
        if len(firsts) != 2:
            raise RuntimeError(f"the next cell did not run on both workers: {firsts}")
        recovery = max(firsts) - failed_at
    return ready, first_seed, restart, recovery


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    reason = netns_hosts.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    net = netns_hosts.create(2)
    net.use_as_home()
    hosts = tuple(h.alias for h in net.hosts)
    kinds = {
        "remote, template": lambda: Cluster(hosts=hosts, cpu=True),
        "remote, no template": lambda: Cluster(hosts=hosts, cpu=True, template=False),
        "local, template": lambda: Cluster(workers=2, cpu=True),
    }
    results: dict[str, list[tuple[float, ...]]] = {k: [] for k in kinds}
    load_before = os.getloadavg()[0]
    try:
        measure(kinds["remote, no template"])  # warm the file cache once, not counted
        for _ in range(args.repeat):
            for kind, make in kinds.items():
                results[kind].append(measure(make))
    finally:
        net.destroy()
    print(f"2 workers, {args.repeat} runs each, alternating; median [min-max] seconds; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    med = {}
    for kind, runs in results.items():
        columns = list(zip(*runs))
        med[kind] = [statistics.median(c) for c in columns]
        cells = [f"{name} {m:.2f} [{min(c):.2f}-{max(c):.2f}]" for name, m, c in zip(COLUMNS, med[kind], columns)]
        print(f"  {kind:20s} " + "   ".join(cells))
    on, off = med["remote, template"], med["remote, no template"]
    print("  remote template / no template: " + ", ".join(
        f"{name} x{a / b:.2f}" for name, a, b in zip(COLUMNS, on, off)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
