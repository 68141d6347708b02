"""The seed tutorial's training cell through the magic, cold and warm, against its hand launch.

    python -m benchmarks.seed [--rounds 3] [--warm 3] [--no-template-too]

The cell is tests/data/seed_train.py, the tutorial's two-worker training; every run must print the
seed's exact line on both workers. One notebook kernel (jupyter_client, the ipykernel a notebook
runs) loads the extension and waits until its worker template is ready; then, each round,
alternating:

* the hand launch: the seed's two shell scripts (worker 0 in the background, worker 1 in the
  foreground), as the tutorial runs them;
* ``cold``: ``%%mwtrain --workers 2 --cpu`` on fresh workers (``%mwcluster stop`` before it): the
  workers forked from the template, then the cell;
* ``warm``: the same cell again on the same workers, ``--warm`` times.

With ``--no-template-too`` a second notebook kernel with ``MWNOTEBOOK_TEMPLATE=0`` (workers started
apart, each importing TensorFlow) runs the same cold and warm cells in the same rounds. Reports
seconds (request to idle, as the notebook's client sees the cell) and ratios to the hand launch.
Writes benchmarks/results/seed/<commit>.json. Not a test: it asserts nothing but the seed's lines.
The first cell 3 s after ``%load_ext`` (the template not ready yet) is ``per_cell.py``'s ``first``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from benchmarks._suite import SEED_CODE, SEED_LINE, Run, cell, hand_launch_checked, start_kernel, stop_kernel, timed

SEED_CELL = "%%mwtrain --workers 2 --cpu\n" + SEED_CODE
TEMPLATE_READY = ("import time as _t\nfrom mwnotebook.launchers.local.template_pool import pool as _pool\n"
                  "while not _pool.templates() or _pool.templates()[0].ready_at is None:\n    _t.sleep(0.1)")


def seed_cell(kc: Any) -> float:
    wall, out = cell(kc, SEED_CELL)
    for i in range(2):
        if f"[worker {i}] {SEED_LINE.format(i=i)}" not in out:
            raise RuntimeError(f"worker {i}'s seed line is missing:\n{out[-3000:]}")
    return wall


def notebook(template: bool) -> tuple[Any, Any]:
    km, kc = start_kernel({"MWNOTEBOOK_TEMPLATE": "1" if template else "0"})
    timed(kc, "%load_ext mwnotebook")
    if template:
        timed(kc, TEMPLATE_READY, timeout=600)
    return km, kc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, default=3, help="warm reruns per round")
    parser.add_argument("--no-template-too", action="store_true", help="also a kernel with MWNOTEBOOK_TEMPLATE=0")
    args = parser.parse_args()
    run = Run("seed")
    kinds = ["template"] + (["no_template"] if args.no_template_too else [])
    kernels = {kind: notebook(kind == "template") for kind in kinds}
    rounds: list[dict[str, Any]] = []
    try:
        for _ in range(args.rounds):
            row: dict[str, Any] = {"hand_launch_s": round(hand_launch_checked(), 3)}
            for kind, (_, kc) in kernels.items():
                timed(kc, "%mwcluster stop", timeout=120)
                row[f"{kind}_cold_s"] = round(seed_cell(kc), 3)
                row[f"{kind}_warm_s"] = [round(seed_cell(kc), 3) for _ in range(args.warm)]
            rounds.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for km, kc in kernels.values():
            stop_kernel(km, kc)
    hand = statistics.median(r["hand_launch_s"] for r in rounds)
    summary: dict[str, Any] = {"hand_launch_s": hand}
    for kind in kinds:
        cold = statistics.median(r[f"{kind}_cold_s"] for r in rounds)
        warm = statistics.median(s for r in rounds for s in r[f"{kind}_warm_s"])
        summary[kind] = {"cold_s": cold, "warm_s": warm, "cold_over_hand": round(cold / hand, 3),
                         "warm_over_hand": round(warm / hand, 3)}
    print(json.dumps(summary, indent=1))
    print(f"written to {run.write({'rounds': rounds, 'summary': summary})}")


if __name__ == "__main__":
    main()
