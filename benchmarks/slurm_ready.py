"""Time-to-ready of 2 Slurm workers (direct and through a login node) vs 2 local and 2 SSH workers,
measured side by side in one run.

One test Slurm (tests/_shared/slurm_cluster.py: munged, slurmctld, two slurmd nodes in network
namespaces, each also running the sshd of tests/_shared/netns_hosts.py) serves both the SSH and the
Slurm workers, so both kinds start kernels on the same two "machines". The kinds alternate in every
round, so that a busy machine slows all of them alike. "Ready" is ``Cluster.start()`` returning;
for Slurm that includes ``salloc`` (an idle cluster: granted at once), the port holders and the
kernels as job steps. ``slurm-login`` is the same through the login node (``--slurm-login``: every
Slurm command and srun over SSH on the login host, the kernels' ports forwarded through it), with the
nodes unreachable from the notebook while it runs. A second figure adds the first cell (``import
tensorflow``). Leaving the ``with`` block stops the workers (and cancels the Slurm job) and is not counted.

Needs root and slurm-wlm + munge. Usage: ``python benchmarks/slurm_ready.py [--repeat 5]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests" / "remote"), str(ROOT / "tests" / "slurm")]

import slurm_cluster  # noqa: E402
from _common import write_result  # noqa: E402

from mwnotebook import Cluster  # noqa: E402

TF_CELL = "import tensorflow as tf\nprint(tf.__version__, flush=True)"


def measure(make: Callable[[], Cluster], network: Callable[[], Any] = contextlib.nullcontext) -> tuple[float, float]:
    started = time.perf_counter()
    with network(), make() as cluster:
        cluster.start()
        ready = time.perf_counter() - started
        cluster.run(TF_CELL, timeout=300)
        with_tf = time.perf_counter() - started
    return ready, with_tf


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reason = slurm_cluster.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    cluster = slurm_cluster.create(2)
    os.environ.update(cluster.env())
    os.environ.pop("SLURM_JOB_ID", None)
    os.environ["HOME"] = str(cluster.net.home)  # the test hosts' ~/.ssh/config, key and known_hosts
    os.environ["MWNOTEBOOK_SSH_CONFIG"] = str(cluster.net.ssh_config)
    os.environ.pop("SSH_AUTH_SOCK", None)
    kinds: dict[str, Callable[[], Cluster]] = {
        "local": lambda: Cluster(workers=2, cpu=True),
        "ssh": lambda: Cluster(hosts=tuple(h.alias for h in cluster.nodes), cpu=True),
        "slurm": lambda: Cluster(slurm="-N 2", workers=2, cpu=True),
        "slurm-login": lambda: Cluster(slurm="-N 2", workers=2, cpu=True, slurm_login=cluster.login.alias),
    }
    networks: dict[str, Callable[[], Any]] = {"slurm-login": cluster.nodes_unreachable}
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    try:
        measure(kinds["local"])  # warm the file cache once, not counted
        for _ in range(args.repeat):
            for kind, make in kinds.items():
                results[kind].append(measure(make, networks.get(kind, contextlib.nullcontext)))
                left = cluster.wait_no_leftovers(15)
                if left:
                    raise RuntimeError(f"left after a {kind} run: {left}")
    finally:
        cluster.destroy()
    load = os.getloadavg()[0]
    print(f"2 workers, {args.repeat} runs each, alternating; median [min-max] seconds; load average {load:.1f}")
    med: dict[str, tuple[float, float]] = {}
    for kind, runs in results.items():
        ready = [r for r, _ in runs]
        tf_ = [t for _, t in runs]
        med[kind] = (statistics.median(ready), statistics.median(tf_))
        print(f"  {kind:11s} ready {med[kind][0]:.2f} [{min(ready):.2f}-{max(ready):.2f}]   "
              f"ready+import tensorflow {med[kind][1]:.2f} [{min(tf_):.2f}-{max(tf_):.2f}]")
    for kind in ("ssh", "slurm", "slurm-login"):
        print(f"  {kind}/local: ready x{med[kind][0] / med['local'][0]:.2f}, "
              f"ready+import x{med[kind][1] / med['local'][1]:.2f}")
    path = write_result("slurm_ready", {"repeat": args.repeat, "load_average_end": load,
                                        "runs": results, "median": med})
    print(f"  results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
