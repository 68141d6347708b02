"""The per-cell cost and scale figures in one run, one after the other, and one table of them.

    python benchmarks/per_cell_summary.py [--before TREE] [--repeats 30] [--rounds 3]

Runs, each in a process of its own and never two at once (the machine has 2 cores):

1. ``noop_breakdown.py --workers 2 8 16``: a no-op cell through ``%%mwtrain``, ``Cluster.run``,
   ipyparallel (engines with TensorFlow imported), a plain TF kernel, and where the milliseconds go;
2. the same script of an older checkout (``--before TREE``, e.g. a ``git worktree`` of the commit
   before the per-cell work), side by side in the same run: the breakdown before and after;
3. ``scale_workers.py --workers 8 16 32``: ready, the seed with N replicas, a no-op, PSS;
4. ``first_cell.py``: the first seed cell 3 s after ``%load_ext`` against the hand launch, and a
   no-op on 8 cold workers.

Each script writes its own results file (``per_cell_*``); this one gathers the figures into
benchmarks/results/per_cell_summary.json and prints them as a Markdown table. Not a test: it
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

from _common import RESULTS, ROOT, write_result


def _commit(tree: pathlib.Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=tree).stdout.strip()


def _run(tree: pathlib.Path, script: str, *args: str) -> dict[str, Any]:
    """Run ``tree``'s benchmark ``script`` with ``args`` (ending in ``--name NAME``); its results."""
    bench = tree / "benchmarks"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(bench), os.environ.get("PYTHONPATH", "")]))
    started = time.monotonic()
    print(f"$ (cd {bench} && python {script} {' '.join(args)})", flush=True)
    subprocess.run([sys.executable, script, *args], cwd=bench, env=env, check=True)
    name = args[list(args).index("--name") + 1]
    result: dict[str, Any] = json.loads((bench / "results" / f"{name}.json").read_text())
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def _noop_rows(result: dict[str, Any]) -> dict[int, dict[str, float]]:
    """Per N: the cells a notebook client timed, and the raw round trips inside the notebook kernel."""
    rows = {}
    for row in result["rows"]:
        cells = dict(row["cells_ms"])
        inside = row.get("inside_notebook_ms", {})
        if "raw_silent" in inside:
            cells["raw_round_trips"] = inside["raw_silent"]
        rows[row["workers"]] = cells
    return rows


def _table(after: dict[str, Any], before: dict[str, Any] | None, scale: dict[str, Any],
           first: dict[str, Any]) -> list[str]:
    lines = ["| what | figure | target |", "|---|---|---|"]
    rows = _noop_rows(after)
    ns = sorted(rows)

    def per_n(key: str) -> str:
        return " / ".join(f"{rows[n][key]:.1f}" if key in rows[n] else "-" for n in ns) + " ms"

    label = "N = " + " / ".join(map(str, ns))
    lines.append(f"| no-op `%%mwtrain` cell, {label} | **{per_n('magic')}** | |")
    lines.append(f"| no-op `Cluster.run(\"pass\")` cell | {per_n('cluster_run')} | |")
    if all("ipyparallel" in rows[n] for n in ns):
        lines.append(f"| ipyparallel `view.execute(\"pass\")`, TF in the engines | {per_n('ipyparallel')} | |")
        ratio = " / ".join(f"{rows[n]['magic'] / rows[n]['ipyparallel']:.2f}x" for n in ns)
        lines.append(f"| magic / ipyparallel | **{ratio}** | <= 0.9x |")
    lines.append(f"| raw execute round trips to the workers (inside the notebook kernel) | {per_n('raw_round_trips')} | |")
    lines.append(f"| a plain ipykernel's cell, TF imported | {rows[ns[0]]['plain_kernel_tf']:.1f} ms | |")
    lines.append(f"| magic / plain TF kernel at N = {ns[0]} | {rows[ns[0]]['magic'] / rows[ns[0]]['plain_kernel_tf']:.2f}x"
                 " | <= 1.25x |")
    if before is not None:
        old = _noop_rows(before)
        shared = [n for n in ns if n in old]
        lines.append(f"| before ({before['commit']}): `%%mwtrain` / `Cluster.run` / raw, N = "
                     f"{' / '.join(map(str, shared))} | "
                     + "; ".join(f"{old[n]['magic']:.1f} / {old[n]['cluster_run']:.1f} / "
                                 f"{old[n].get('raw_round_trips', float('nan')):.1f}" for n in shared)
                     + " ms | |")
    by_n = {r["workers"]: r for r in scale["rows"]}
    for n, row in sorted(by_n.items()):
        lines.append(f"| {n} workers: ready (template up) / seed cold / seed warm | {row['ready_s']:.2f} s / "
                     f"{row['seed_cold_s']:.1f} s / {row['seed_warm_s']:.1f} s | 32 ready <= 6 s |")
    if 8 in by_n and 32 in by_n:
        lines.append(f"| no-op `Cluster.run` at N = 32 / N = 8 | {by_n[32]['noop_ms'] / by_n[8]['noop_ms']:.2f}x "
                     f"({by_n[32]['noop_ms']:.1f} / {by_n[8]['noop_ms']:.1f} ms) | <= 4x |")
    extra = [f"{r['pss_per_extra_worker_with_template_mib']:.1f}" for _, r in sorted(by_n.items())
             if "pss_per_extra_worker_with_template_mib" in r]
    lines.append(f"| PSS per extra forked worker after the seed (with the template's share) | {' / '.join(extra)} MiB"
                 " | <= 120 MiB |")
    s = first["summary"]
    lines.append(f"| first seed cell 3 s after `%load_ext` / hand launch | **{s['seed_ratio_median_of_rounds']:.2f}x** "
                 f"({s['seed_first_cell_s']:.2f} / {s['hand_launch_s']:.2f} s; waited "
                 f"{s['seed_waited_for_template_s']:.2f} s for the template) | <= 0.35x |")
    lines.append(f"| no-op on 8 cold workers 3 s after `%load_ext` | **{s['noop_8_first_cell_s']:.2f} s** (waited "
                 f"{s['noop_8_waited_for_template_s']:.2f} s for the template, {s['noop_8_rest_s']:.2f} s the rest) "
                 "| <= 1.5 s |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=pathlib.Path, help="an older checkout whose no-op breakdown runs too")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    commit = _commit(ROOT)
    repeats = ["--repeats", str(args.repeats)]
    after = _run(ROOT, "noop_breakdown.py", "--workers", "2", "8", "16", *repeats, "--name", "per_cell_noop")
    before = None
    if args.before is not None:
        before = _run(args.before.resolve(), "noop_breakdown.py", "--workers", "2", "8", "16", *repeats,
                      "--name", "per_cell_noop_before")
    scale = _run(ROOT, "scale_workers.py", "--workers", "8", "16", "32", "--name", "per_cell_scale")
    first = _run(ROOT, "first_cell.py", "--rounds", str(args.rounds), "--name", "per_cell_first_cell")
    table = _table(after, before, scale, first)
    path = write_result("per_cell_summary", {
        "command": " ".join(["python", "benchmarks/per_cell_summary.py", *sys.argv[1:]]), "commit": commit,
        "load_average_before": load_before, "load_average_after": os.getloadavg(), "table": table,
        "parts": {"noop_breakdown": after, "noop_breakdown_before": before, "scale_workers": scale,
                  "first_cell": first}})
    print("\n".join(table))
    print(f"written to {path} (and the parts' own files in {RESULTS})")


if __name__ == "__main__":
    main()
