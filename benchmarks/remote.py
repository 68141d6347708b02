"""Remote workers' ready times: SSH test hosts (with and without their worker templates) and a test
Slurm (direct and through a login node), against local workers, side by side in one run.

    python -m benchmarks.remote ssh [--repeat 2]
    python -m benchmarks.remote slurm [--repeat 5]

``ssh``: two sshd test hosts in network namespaces (testbed/netns_hosts.py; root). Each run
makes a new cluster, so a new launcher: remote templates start cold (they import TensorFlow and
tf_keras while the ports are reserved), the local one is shared by the process (warm after the first
run). Columns: "ready" (``Cluster.start()`` returning), "first seed" (ready + the seed cell,
tests/data/seed_train.py, checked for its exact lines), "restart" (``Cluster.restart()``),
"recovery" (a cell failing on worker 1, tests/data/fail_on_worker1.py, until the next cell's first
instruction runs on both workers; wall clocks of one machine).

``slurm``: one test Slurm (testbed/slurm_cluster.py: munged, slurmctld, two slurmd nodes in
network namespaces, each also running an sshd; root, slurm-wlm and munge) serves both the SSH and the
Slurm workers, so both kinds start kernels on the same two "machines". "Ready" for Slurm includes
``salloc`` (an idle cluster: granted at once), the port holders and the kernels as job steps;
``slurm-login`` is the same through the login node (``--slurm-login``), with the nodes unreachable
from the notebook while it runs. A second figure adds the first cell (``import tensorflow``).

The kinds alternate in every round, so that a busy machine slows all of them alike. Writes
benchmarks/results/remote/<commit>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks._suite import ROOT, Run
from testbed import netns_hosts, slurm_cluster
from testbed.seed_cell import SEED_CELL, expected_line

FAIL_CELL = (ROOT / "tests" / "data" / "fail_on_worker1.py").read_text(encoding="utf-8")
FIRST_INSTRUCTION = "import time\nprint('FIRST', time.time(), flush=True)"
SSH_COLUMNS = ("ready", "first seed", "restart", "recovery")
TF_CELL = "import tensorflow as tf\nprint(tf.__version__, flush=True)"


def ssh_measure(make: Callable[[], Any]) -> tuple[float, ...]:
    from mwnotebook import ClusterRunError

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


def ssh(repeat: int) -> dict[str, Any]:
    from mwnotebook import Cluster

    net = netns_hosts.create(2)
    net.use_as_home()
    hosts = tuple(h.alias for h in net.hosts)
    kinds: dict[str, Callable[[], Any]] = {
        "remote, template": lambda: Cluster(hosts=hosts, cpu=True),
        "remote, no template": lambda: Cluster(hosts=hosts, cpu=True, template=False),
        "local, template": lambda: Cluster(workers=2, cpu=True),
    }
    runs: dict[str, list[tuple[float, ...]]] = {k: [] for k in kinds}
    try:
        ssh_measure(kinds["remote, no template"])  # warm the file cache once, not counted
        for _ in range(repeat):
            for kind, make in kinds.items():
                runs[kind].append(ssh_measure(make))
    finally:
        net.destroy()
    median = {kind: dict(zip(SSH_COLUMNS, (statistics.median(c) for c in zip(*r)))) for kind, r in runs.items()}
    for kind, values in median.items():
        print(f"  {kind:20s} " + "   ".join(f"{k} {v:.2f}" for k, v in values.items()))
    return {"columns": SSH_COLUMNS, "runs": runs, "median_s": median}


def slurm_measure(make: Callable[[], Any], network: Callable[[], Any]) -> tuple[float, float]:
    started = time.perf_counter()
    with network(), make() as cluster:
        cluster.start()
        ready = time.perf_counter() - started
        cluster.run(TF_CELL, timeout=300)
        with_tf = time.perf_counter() - started
    return ready, with_tf


@contextlib.contextmanager
def slurm_test_cluster(nodes: int = 2) -> Iterator[slurm_cluster.SlurmCluster]:
    """A test Slurm whose nodes are SSH test hosts too, with this process (and every kernel it starts
    later) pointed at both, the way a user's environment would be; destroyed at the end."""
    cluster = slurm_cluster.create(nodes)
    try:
        os.environ.update(cluster.env())
        os.environ.pop("SLURM_JOB_ID", None)
        cluster.net.use_as_home()  # the test hosts' ~/.ssh/config, key and known_hosts
        yield cluster
    finally:
        cluster.destroy()


def slurm(repeat: int) -> dict[str, Any]:
    with slurm_test_cluster(2) as cluster:
        return slurm_rounds(cluster, repeat)


def slurm_rounds(cluster: slurm_cluster.SlurmCluster, repeat: int) -> dict[str, Any]:
    from mwnotebook import Cluster

    kinds: dict[str, Callable[[], Any]] = {
        "local": lambda: Cluster(workers=2, cpu=True),
        "ssh": lambda: Cluster(hosts=tuple(h.alias for h in cluster.nodes), cpu=True),
        "slurm": lambda: Cluster(slurm="-N 2", workers=2, cpu=True),
        "slurm-login": lambda: Cluster(slurm="-N 2", workers=2, cpu=True, slurm_login=cluster.login.alias),
    }
    networks: dict[str, Callable[[], Any]] = {"slurm-login": cluster.nodes_unreachable}
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    slurm_measure(kinds["local"], contextlib.nullcontext)  # warm the file cache once, not counted
    for _ in range(repeat):
        for kind, make in kinds.items():
            runs[kind].append(slurm_measure(make, networks.get(kind, contextlib.nullcontext)))
            left = cluster.wait_no_leftovers(15)
            if left:
                raise RuntimeError(f"left after a {kind} run: {left}")
    median = {kind: {"ready": statistics.median(r for r, _ in rs), "ready_and_import_tf": statistics.median(t for _, t in rs)}
              for kind, rs in runs.items()}
    for kind, values in median.items():
        print(f"  {kind:11s} ready {values['ready']:.2f} s, ready + import tensorflow {values['ready_and_import_tf']:.2f} s")
    return {"runs": runs, "median_s": median}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend", choices=("ssh", "slurm"))
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default: ssh 2, slurm 5)")
    args = parser.parse_args()
    reason = (netns_hosts if args.backend == "ssh" else slurm_cluster).unavailable_reason()
    if reason:
        print(f"cannot run here: {reason}")
        return 1
    run = Run("remote")
    if args.backend == "ssh":
        results = {"ssh": ssh(args.repeat or 2)}
    else:
        results = {"slurm": slurm(args.repeat or 5)}
    print(f"written to {run.write(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
