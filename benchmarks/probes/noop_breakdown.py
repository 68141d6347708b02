"""Where each millisecond of a no-op ``%%mwtrain`` cell goes, side by side with ipyparallel and a plain kernel.

    python -m benchmarks.probes.noop_breakdown [--workers 2 8] [--repeats 30] [--no-fresh] [--no-ipp]

One run, one machine, everything alternating in rounds:

* **cells timed by a client of the notebook kernel** (request -> idle, as a notebook sees them):
  ``%%mwtrain --workers N --cpu`` / ``pass`` (forked TF workers); ``mw_cluster.run("pass")``;
  ipyparallel's ``view.execute("pass", block=True)`` on N engines with TensorFlow imported; an empty
  cell (the notebook kernel's own round trip); and, from the same client, a plain ipykernel's
  ``pass`` with and without TensorFlow imported.
* **inside the notebook kernel** (``noop_probe.inside``): the magic call without the notebook's
  round trip, ``Cluster.run``, ``AsyncCluster.run``, raw execute round trips (silent; with the output
  count expression; with output count + settle), and each request split into client -> kernel,
  the kernel's handler, reply -> client.
* **inside each worker** (``noop_probe.WORKER_PROBE``): the per-cell hooks (hold, settle, output
  count, IPython's user-expression formatting), IPython's ``run_cell("pass")``, GC object count,
  frozen objects, a full collection's cost, threads -- for forked workers and (unless
  ``--no-fresh``) freshly started ones before and after ``import tensorflow``.
* ``cProfile`` of the magic's own steps (ms per call, inflated by the profiler).

Writes benchmarks/results/noop_breakdown/<commit>.json. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from jupyter_client.manager import start_new_kernel

from benchmarks._suite import ROOT, write_result


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def timed(kc: Any, code: str, timeout: float = 600) -> float:
    started = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
    elapsed = time.perf_counter() - started
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"{code[:60]!r} failed: {reply['content'].get('ename')}: {reply['content'].get('evalue')}")
    return elapsed


def value(kc: Any, expression: str, timeout: float = 900) -> Any:
    """Evaluate ``expression`` (JSON-able) in the kernel and return it."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream" and msg["content"].get("name") == "stdout":
            out.append(msg["content"]["text"])
    reply = kc.execute_interactive(f"import json as _json\nprint('@@' + _json.dumps({expression}))",
                                   timeout=timeout, output_hook=hook)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"{expression!r} failed: {reply['content'].get('evalue')}")
    text = "".join(out)
    return json.loads(text[text.rindex("@@") + 2:])


def start(name: str) -> tuple[Any, Any]:
    km, kc = start_new_kernel(kernel_name="python3", env=_env())
    return km, kc


def measure(nb: Any, plain: Any, plain_tf: Any, n: int, repeats: int, ipp: bool, fresh: bool) -> dict[str, Any]:
    magic = f"%%mwtrain --workers {n} --cpu\npass"
    timed(nb, magic)  # forks the workers (and shows the TF_CONFIGs once)
    timed(nb, "from benchmarks.probes import noop_probe as _p\nfrom mwnotebook.frontend.notebook import magics as _mw_magics\n"
              "mw_cluster = _mw_magics._magics.session.cluster")
    cells = {"magic": magic, "cluster_run": 'mw_cluster.run("pass")', "notebook_empty": "pass"}
    if ipp:
        timed(nb, "import ipyparallel as _ipp\n"
                  f"_ippc = _ipp.Cluster(n={n}, log_level=40)\n_rc = _ippc.start_and_connect_sync()\n"
                  f"_rc.wait_for_engines({n}, timeout=600)\n_view = _rc[:]\n"
                  "_view.execute('import tensorflow', block=True)", timeout=900)
        cells["ipyparallel"] = '_view.execute("pass", block=True);'  # no execute_result: like the magic
    clients = {name: nb for name in cells} | {"plain_kernel": plain, "plain_kernel_tf": plain_tf}
    cells |= {"plain_kernel": "pass", "plain_kernel_tf": "pass"}
    for _ in range(3):
        for name, code in cells.items():
            timed(clients[name], code)
    samples: dict[str, list[float]] = {name: [] for name in cells}
    for _ in range(repeats):
        for name, code in cells.items():
            samples[name].append(timed(clients[name], code))
    row: dict[str, Any] = {"workers": n,
                           "cells_ms": {k: round(1000 * statistics.median(v), 3) for k, v in samples.items()}}
    row["inside_notebook_ms"] = value(nb, f"_p.inside(mw_cluster, {repeats})")
    if ipp:
        row["inside_notebook_ms"]["ipyparallel_call"] = value(
            nb, f"_p._timed(lambda: _view.execute('pass', block=True), {repeats})")
    row["profile_magic_ms_per_call"] = value(nb, f"_p.profile_magic(mw_cluster, {repeats})")
    row["workers_forked"] = value(nb, "_p.worker_probe(mw_cluster)")
    if ipp:
        timed(nb, "_rc.close()\n_ippc.stop_cluster_sync()")
    timed(nb, "%mwcluster stop")
    if fresh:
        timed(nb, f"from mwnotebook import Cluster as _C\n_fresh = _C(workers={n}, cpu=True, template=False)\n"
                  "_fresh.start()")
        row["fresh_no_tf"] = {"raw_output_count_ms": value(nb, f"_p.inside_raw(_fresh, {repeats})"),
                              "workers": value(nb, "_p.worker_probe(_fresh)")}
        timed(nb, "_fresh.run('import tensorflow')", timeout=900)
        row["fresh_tf"] = {"raw_output_count_ms": value(nb, f"_p.inside_raw(_fresh, {repeats})"),
                           "workers": value(nb, "_p.worker_probe(_fresh)")}
        timed(nb, "_fresh.stop()")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--no-fresh", action="store_true", help="skip freshly started (exec'd) workers")
    parser.add_argument("--no-ipp", action="store_true", help="skip ipyparallel")
    parser.add_argument("--name", default="noop_breakdown", help="results file name (benchmarks/results/NAME/<commit>.json)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    kernels = [start(name) for name in ("notebook", "plain", "plain_tf")]
    (_, nb), (_, plain), (_, plain_tf) = kernels
    rows = []
    try:
        timed(plain_tf, "import tensorflow", timeout=600)
        timed(nb, "%load_ext mwnotebook")
        time.sleep(3)
        for n in args.workers:
            rows.append(measure(nb, plain, plain_tf, n, args.repeats, not args.no_ipp,
                                not args.no_fresh and n <= 8))
            print(json.dumps(rows[-1]["cells_ms"]), json.dumps(rows[-1]["inside_notebook_ms"]), flush=True)
    finally:
        for km, kc in kernels:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    path = write_result(args.name, {"command": " ".join(["python", "benchmarks/noop_breakdown.py", *sys.argv[1:]]),
                                    "commit": commit, "repeats": args.repeats, "load_average_before": load_before,
                                    "load_average_after": os.getloadavg(), "rows": rows})
    for row in rows:
        c = row["cells_ms"]
        ratios = ""
        if "ipyparallel" in c:
            ratios = f" | magic/ipp {c['magic'] / c['ipyparallel']:.2f}x"
        print(f"N={row['workers']}: " + ", ".join(f"{k} {v:.1f}" for k, v in c.items())
              + f"{ratios} | magic/plain_tf {c['magic'] / c['plain_kernel_tf']:.2f}x")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
