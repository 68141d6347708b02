"""PSS of remote workers forked from their host's worker template, with and without ``gc.freeze``.

    python -m benchmarks.probes.remote_template_freeze [--repeat 3] [--per-host 2]

Two SSH test hosts (network namespaces made by testbed/netns_hosts.py; needs root), ``--per-host``
workers on each, forked from the host's template (processes/shipped/remote_template.py). Two kinds
alternate in one run, a new cluster (so a new template per host) each time:

* ``frozen``: the template freezes what it loaded (``gc.freeze``, the default);
* ``unfrozen``: ``MWNOTEBOOK_TEMPLATE_GC_FREEZE=0`` in the workers' environment (so in the
  template's) leaves its objects in the collector's sight, as before.

For each: the kernels' frozen-object count (to confirm the kind), the workers' PSS (``psutil``
``memory_full_info().pss``, the kernels' pids from ``Cluster.status()``; the hosts share this machine's
process table; and their USS, the pages only each one maps) and the templates' PSS at three moments: ready, after the seed cell
(tests/data/seed_train.py, every worker must print its ``replicas=N`` line), and after a cell that runs
``gc.collect()`` (what a long session does sooner or later), whose duration each worker prints.
Writes benchmarks/results/remote_template_freeze/<commit>.json. Not a test: it asserts only the seed's lines.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from typing import Any

import psutil

from benchmarks._suite import ROOT, SEED_CODE, write_result
from mwnotebook import Cluster
from testbed import netns_hosts

MIB = 2 ** 20
FREEZE_ENV = "MWNOTEBOOK_TEMPLATE_GC_FREEZE"  # processes/shipped/remote_template.py
COLLECT_CELL = ("import gc, time\nstarted = time.perf_counter()\ngc.collect()\n"
                "print(f'collect {time.perf_counter() - started:.4f}', flush=True)")


def memory_mib(pid: int | None) -> tuple[float, float]:
    """(PSS, USS) of a process in MiB; USS: the pages only it maps (what one more worker costs)."""
    try:
        info = psutil.Process(pid).memory_full_info() if pid else None
    except psutil.Error:
        info = None
    return (info.pss / MIB, info.uss / MIB) if info else (float("nan"), float("nan"))


def pss_mib(pid: int | None) -> float:
    return memory_mib(pid)[0]


def snapshot(cluster: Cluster) -> dict[str, Any]:
    sizes = [memory_mib(info.pid) for info in cluster.status()]
    workers = [pss for pss, _ in sizes]
    templates = [pss_mib(t.pid) for t in cluster.launcher.templates]
    return {"workers_mib": [round(w, 1) for w in workers], "per_worker_mib": round(statistics.mean(workers), 1),
            "per_worker_uss_mib": round(statistics.mean(uss for _, uss in sizes), 1),
            "templates_mib": [round(t, 1) for t in templates],
            "total_mib": round(sum(workers) + sum(templates), 1)}


def measure(hosts: tuple[str, ...], frozen: bool) -> dict[str, Any]:
    env = {} if frozen else {FREEZE_ENV: "0"}
    row: dict[str, Any] = {"kind": "frozen" if frozen else "unfrozen"}
    with Cluster(hosts=hosts, cpu=True, env=env) as cluster:
        cluster.start()
        n = len(cluster.status())
        counts = cluster.run("import gc\nprint(gc.get_freeze_count(), flush=True)")
        row["frozen_objects"] = [int(counts.stdout(i)) for i in range(n)]
        if any(info.pid is None for info in cluster.status()) or not cluster.launcher.templates:
            raise RuntimeError("the workers were not forked from templates")
        row["ready"] = snapshot(cluster)
        seed = cluster.run(SEED_CODE, timeout=900)
        for i in range(n):
            if not re.search(rf"worker={i} replicas={n} initial_loss=", seed.stdout(i)):
                raise RuntimeError(f"worker {i} did not print the seed's line:\n{seed.stdout(i)[-2000:]}")
        row["after_seed"] = snapshot(cluster)
        collected = cluster.run(COLLECT_CELL, timeout=300)
        row["gc_collect_s"] = [float(collected.stdout(i).split()[-1]) for i in range(n)]
        row["after_gc_collect"] = snapshot(cluster)
    return row


def summary(rows: list[dict[str, Any]], kind: str, moment: str, field: str = "per_worker_mib") -> float:
    return statistics.median(r[moment][field] for r in rows if r["kind"] == kind)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--per-host", type=int, default=2, help="workers on each of the 2 hosts")
    args = parser.parse_args()
    reason = netns_hosts.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    net = netns_hosts.create(2)
    net.use_as_home()
    os.environ.pop("MWNOTEBOOK_TEMPLATE", None)
    hosts = tuple(f"{h.alias}*{args.per_host}" for h in net.hosts)
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    try:
        for repeat in range(args.repeat):
            kinds = (True, False) if repeat % 2 == 0 else (False, True)  # alternate which goes first
            for frozen in kinds:
                rows.append(measure(hosts, frozen))
                rows[-1]["load_average"] = os.getloadavg()
                print(rows[-1], flush=True)
    finally:
        net.destroy()
    table = {kind: {moment: summary(rows, kind, moment) for moment in ("ready", "after_seed", "after_gc_collect")}
             for kind in ("frozen", "unfrozen")}
    for kind in table:
        for moment in ("ready", "after_seed", "after_gc_collect"):
            table[kind][f"{moment}_uss"] = summary(rows, kind, moment, "per_worker_uss_mib")
            table[kind][f"{moment}_total"] = summary(rows, kind, moment, "total_mib")
        table[kind]["gc_collect_s"] = statistics.median(
            s for r in rows if r["kind"] == kind for s in r["gc_collect_s"])
    ratios = {moment: round(table["frozen"][moment] / table["unfrozen"][moment], 3) for moment in table["frozen"]}
    path = write_result("remote_template_freeze", {
        "command": " ".join(["python", "benchmarks/remote_template_freeze.py", *sys.argv[1:]]), "commit": commit,
        "workers": 2 * args.per_host, "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "median_per_worker_mib": table, "frozen_over_unfrozen": ratios, "rows": rows})
    print(f"{2 * args.per_host} remote workers forked from 2 hosts' templates, {args.repeat} runs of each kind, "
          f"alternating; load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    for kind, values in table.items():
        print(f"  {kind:9s} per-worker PSS: ready {values['ready']:.1f} MiB, after seed {values['after_seed']:.1f}, "
              f"after gc.collect {values['after_gc_collect']:.1f}; USS {values['ready_uss']:.1f} / "
              f"{values['after_seed_uss']:.1f} / {values['after_gc_collect_uss']:.1f}; workers + templates "
              f"{values['ready_total']:.0f} / {values['after_seed_total']:.0f} / {values['after_gc_collect_total']:.0f}; "
              f"gc.collect {values['gc_collect_s'] * 1000:.0f} ms")
    print(f"  frozen / unfrozen: {ratios}")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
