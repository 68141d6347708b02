"""Time-to-ready of 2 remote workers (two sshd test hosts in network namespaces) vs 2 local ones.

Both kinds are measured side by side in one run, alternating, so that the ratio is fair on a busy
machine. "Ready" is ``Cluster.start()`` returning: ports reserved, kernels started, every kernel
answering on shell and IOPub. A second figure adds the first cell (``import tensorflow``).

Needs root (``ip netns``). Usage: ``python benchmarks/remote_ready.py [--repeat 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "remote")]

import netns_hosts  # noqa: E402

from mwnotebook import Cluster  # noqa: E402

TF_CELL = "import tensorflow as tf\nprint(tf.__version__, flush=True)"


def measure(make: callable[[], Cluster]) -> tuple[float, float]:
    started = time.perf_counter()
    with make() as cluster:
        cluster.start()
        ready = time.perf_counter() - started
        cluster.run(TF_CELL, timeout=300)
        with_tf = time.perf_counter() - started
    return ready, with_tf


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reason = netns_hosts.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    net = netns_hosts.create(2)
    os.environ["HOME"] = str(net.home)  # the test hosts' ~/.ssh/config, key and known_hosts
    os.environ.pop("SSH_AUTH_SOCK", None)
    kinds = {
        "local": lambda: Cluster(workers=2, cpu=True),
        "remote": lambda: Cluster(hosts=tuple(h.alias for h in net.hosts), cpu=True),
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    try:
        measure(kinds["local"])  # warm the file cache once, not counted
        for _ in range(args.repeat):
            for kind, make in kinds.items():
                results[kind].append(measure(make))
    finally:
        net.destroy()
    print(f"2 workers, {args.repeat} runs each, alternating; median [min-max] seconds")
    med = {}
    for kind, runs in results.items():
        ready = [r for r, _ in runs]
        tf_ = [t for _, t in runs]
        med[kind] = (statistics.median(ready), statistics.median(tf_))
        print(f"  {kind:6s} ready {med[kind][0]:.2f} [{min(ready):.2f}-{max(ready):.2f}]   "
              f"ready+import tensorflow {med[kind][1]:.2f} [{min(tf_):.2f}-{max(tf_):.2f}]")
    print(f"  remote/local: ready x{med['remote'][0] / med['local'][0]:.2f}, "
          f"ready+import x{med['remote'][1] / med['local'][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
