"""What one cell costs: a no-op ``%%mwtrain`` cell against ``Cluster.run`` and ipyparallel, many
workers, and the first cell after ``%load_ext``.

    python -m benchmarks.per_cell [--parts noop scale first] [--workers 2 8 16 32] [--repeats 30]

Parts, each run one after the other (the machine has 2 cores):

* ``noop`` -- for each N of ``--workers``, in one notebook kernel (jupyter_client, the ipykernel a
  notebook runs), cells timed by its client from request to idle, all alternating each round:
  ``%%mwtrain --workers N --cpu`` / ``pass`` (forked TF workers); ``mw_cluster.run("pass")`` on the
  same warm cluster; ipyparallel's ``view.execute("pass", block=True)`` on N engines with
  TensorFlow imported (``--no-ipp`` skips it); an empty cell (the notebook kernel's own round trip);
  and a plain ipykernel's ``pass`` with TensorFlow imported. Medians of ``--repeats`` rounds.
* ``scale`` -- for each N of ``--scale-workers`` (default 8 16 32), through the Python API in this
  process, the worker template started first: start to ready, the seed cell (tests/data/seed_train.py)
  with N replicas cold and warm (every worker must print ``replicas=N``), a no-op ``Cluster.run``,
  the workers' PSS after the seed and the template's (PSS per extra worker is the slope of both).
* ``first`` -- ``--rounds`` rounds, alternating: the seed's hand launch (its two shell scripts); a
  fresh notebook kernel, ``%load_ext mwnotebook``, 3 s, the seed cell on 2 workers; another fresh
  kernel, 3 s, a no-op cell on 8 workers; and how long each cell waited for the worker template.

Writes benchmarks/results/per_cell/<commit>.json. Not a test: it asserts nothing but the seed's lines.
The deeper breakdown of a no-op cell (inside the notebook kernel, each worker's hooks, cProfile) is
benchmarks/probes/noop_breakdown.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import psutil

from benchmarks._suite import (
    SEED_CODE,
    SEED_LINE,
    Run,
    alternate,
    cell,
    check_seed,
    hand_launch_checked,
    start_kernel,
    stop_kernel,
    timed,
)

MIB = 2 ** 20

#: The notebook's cluster as ``mw_cluster`` (the magic's session holds it).
GRAB_CLUSTER = ("from mwnotebook.frontend.notebook import magics as _mw_magics\n"
                "mw_cluster = _mw_magics._magics.session.cluster")


# ----------------------------------------------------------------------------- noop
def noop_row(nb: Any, plain_tf: Any, n: int, repeats: int, ipp: bool) -> dict[str, Any]:
    magic = f"%%mwtrain --workers {n} --cpu\npass"
    timed(nb, magic)  # forks the workers (and shows the TF_CONFIGs once)
    timed(nb, GRAB_CLUSTER)
    cells = {"magic": (nb, magic), "cluster_run": (nb, 'mw_cluster.run("pass")'), "notebook_empty": (nb, "pass"),
             "plain_kernel_tf": (plain_tf, "pass")}
    if ipp:
        timed(nb, "import ipyparallel as _ipp\n"
                  f"_ippc = _ipp.Cluster(n={n}, log_level=40)\n_rc = _ippc.start_and_connect_sync()\n"
                  f"_rc.wait_for_engines({n}, timeout=600)\n_view = _rc[:]\n"
                  "_view.execute('import tensorflow', block=True)", timeout=900)
        cells["ipyparallel"] = (nb, '_view.execute("pass", block=True);')  # no execute_result: like the magic
    try:
        row: dict[str, Any] = {"workers": n, "cells_ms": alternate(cells, repeats)}
    finally:
        if ipp:
            timed(nb, "_rc.close()\n_ippc.stop_cluster_sync()")
        timed(nb, "%mwcluster stop")
    c = row["cells_ms"]
    if "ipyparallel" in c:
        row["magic_over_ipyparallel"] = round(c["magic"] / c["ipyparallel"], 3)
    row["load_after"] = os.getloadavg()
    return row


def noop(workers: list[int], repeats: int, ipp: bool) -> list[dict[str, Any]]:
    (nb_km, nb), (tf_km, plain_tf) = start_kernel(), start_kernel()
    rows = []
    try:
        timed(plain_tf, "import tensorflow", timeout=600)
        timed(nb, "%load_ext mwnotebook")
        time.sleep(3)  # the chart libraries are imported in the background at load time
        for n in workers:
            rows.append(noop_row(nb, plain_tf, n, repeats, ipp))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        stop_kernel(nb_km, nb)
        stop_kernel(tf_km, plain_tf)
    return rows


# ----------------------------------------------------------------------------- scale
def pss(pid: int | None) -> tuple[int, int]:
    """(PSS of the process, PSS of its descendants) in bytes."""
    if pid is None:
        return 0, 0
    try:
        proc = psutil.Process(pid)
        return proc.memory_full_info().pss, sum(c.memory_full_info().pss for c in proc.children(recursive=True))
    except psutil.Error:
        return 0, 0


def scale_row(n: int, repeats: int, template_pid: int) -> dict[str, Any]:
    from mwnotebook import Cluster

    row: dict[str, Any] = {"workers": n}
    cluster = Cluster(workers=n, cpu=True)
    try:
        started = time.perf_counter()
        cluster.start()
        row["ready_s"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        result = cluster.run(SEED_CODE, timeout=900)
        row["seed_cold_s"] = round(time.perf_counter() - started, 3)
        check_seed(result.stdout, n)
        sizes = [pss(info.pid) for info in cluster.status()]
        row["pss_kernels_mib"] = round(sum(s[0] for s in sizes) / MIB, 1)
        row["pss_kernel_children_mib"] = round(sum(s[1] for s in sizes) / MIB, 1)
        # The template shares its pages with the N workers: its own PSS falls as N grows, so what an
        # extra worker costs the machine is the slope of workers + template.
        row["template_pss_with_workers_mib"] = round(pss(template_pid)[0] / MIB, 1)
        started = time.perf_counter()
        check_seed(cluster.run(SEED_CODE, timeout=900).stdout, n)
        row["seed_warm_s"] = round(time.perf_counter() - started, 3)
        for _ in range(5):
            cluster.run("pass")
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            cluster.run("pass")
            samples.append(time.perf_counter() - started)
        row["noop_ms"] = round(1000 * statistics.median(samples), 2)
    finally:
        cluster.stop()
    row["load_after"] = os.getloadavg()
    return row


def scale(workers: list[int], repeats: int) -> dict[str, Any]:
    from mwnotebook.engine.loop import background_loop
    from mwnotebook.launchers.local.prestart import prestart_template

    started = time.perf_counter()
    template = background_loop().run(prestart_template(), timeout=300)
    if template is None:
        raise SystemExit("no worker template could be started here")
    out: dict[str, Any] = {"template_ready_s": round(time.perf_counter() - started, 2), "rows": []}
    rows = out["rows"]
    for n in workers:
        rows.append(scale_row(n, repeats, template.pid))
        print(json.dumps(rows[-1]), flush=True)
    for prev, row in zip(rows, rows[1:]):
        def total(r: dict[str, Any]) -> float:
            return float(r["pss_kernels_mib"] + r["pss_kernel_children_mib"] + r["template_pss_with_workers_mib"])
        row["pss_per_extra_worker_with_template_mib"] = round((total(row) - total(prev))
                                                              / (row["workers"] - prev["workers"]), 1)
    return out


# ----------------------------------------------------------------------------- first
PROBE = ("import json as _j, time as _t\nfrom mwnotebook.launchers.local.template_pool import pool as _pool\n"
         "_tp = _pool.templates()[0]\n"
         "print('@@' + _j.dumps({'template_ready_s': _tp.ready_at - _tp.started_at, "
         "'ready_before_now_s': _t.monotonic() - _tp.ready_at, 'now': _t.monotonic()}))")


def first_cell(code: str, check: bool) -> dict[str, float]:
    km, kc = start_kernel()
    try:
        timed(kc, "import time as _t")
        timed(kc, "%load_ext mwnotebook")
        time.sleep(3)
        _, now = cell(kc, "print('@@', _t.monotonic())")
        cell_started = float(now.split("@@")[1])
        wall, out = cell(kc, code)
        if check and any(f"[worker {i}] {SEED_LINE.format(i=i)}" not in out for i in range(2)):
            raise RuntimeError(f"the seed's line is missing:\n{out[-3000:]}")
        info = json.loads(cell(kc, PROBE)[1].split("@@")[1])
        waited = max(0.0, info["now"] - info["ready_before_now_s"] - cell_started)
        timed(kc, "%mwcluster stop", timeout=60)
        return {"cell_s": round(wall, 3), "template_ready_s": round(info["template_ready_s"], 3),
                "waited_for_template_s": round(waited, 3), "rest_s": round(wall - waited, 3)}
    finally:
        stop_kernel(km, kc)


def first(rounds: int) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for _ in range(rounds):
        hand = hand_launch_checked()
        seed = first_cell("%%mwtrain --workers 2 --cpu\n" + SEED_CODE, True)
        noop8 = first_cell("%%mwtrain --workers 8 --cpu\npass", False)
        out.append({"hand_launch_s": round(hand, 3), "seed": seed, "noop_8": noop8,
                    "seed_over_hand": round(seed["cell_s"] / hand, 3), "load_after": os.getloadavg()})
        print(json.dumps(out[-1]), flush=True)
    med = statistics.median
    return {"rounds": out, "summary": {
        "hand_launch_s": med(r["hand_launch_s"] for r in out),
        "seed_first_cell_s": med(r["seed"]["cell_s"] for r in out),
        "seed_over_hand": med(r["seed_over_hand"] for r in out),
        "seed_waited_for_template_s": med(r["seed"]["waited_for_template_s"] for r in out),
        "noop_8_first_cell_s": med(r["noop_8"]["cell_s"] for r in out),
        "noop_8_waited_for_template_s": med(r["noop_8"]["waited_for_template_s"] for r in out)}}


def table(results: dict[str, Any]) -> list[str]:
    lines = []
    for row in results.get("noop", []):
        c = row["cells_ms"]
        ratio = f", magic / ipyparallel {row['magic_over_ipyparallel']:.2f}x" if "magic_over_ipyparallel" in row else ""
        lines.append(f"N={row['workers']}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in c.items()) + ratio)
    for row in results.get("scale", {}).get("rows", []):
        lines.append(f"N={row['workers']}: ready {row['ready_s']:.2f} s, seed {row['seed_cold_s']:.1f} / "
                     f"{row['seed_warm_s']:.1f} s, no-op {row['noop_ms']:.1f} ms, PSS per extra worker "
                     f"{row.get('pss_per_extra_worker_with_template_mib', '-')} MiB")
    if "first" in results:
        lines.append("first cell: " + json.dumps(results["first"]["summary"]))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=("noop", "scale", "first"), default=["noop", "scale", "first"])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8, 16, 32], help="N of the noop part")
    parser.add_argument("--scale-workers", type=int, nargs="+", default=[8, 16, 32], help="N of the scale part")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the first part")
    parser.add_argument("--no-ipp", action="store_true", help="skip ipyparallel in the noop part")
    args = parser.parse_args()
    run = Run("per_cell")
    results: dict[str, Any] = {}
    if "noop" in args.parts:
        results["noop"] = noop(args.workers, args.repeats, not args.no_ipp)
    if "scale" in args.parts:
        results["scale"] = scale(args.scale_workers, args.repeats)
    if "first" in args.parts:
        results["first"] = first(args.rounds)
    path = run.write(results)
    print("\n".join(table(results)))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
