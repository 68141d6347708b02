"""``--max-restarts``: a preempted training run against an undisturbed one, side by side.

For each training cell (the tf_keras ``fit`` with ``BackupAndRestore`` and the seed's custom loop
with a ``CheckpointManager``, both from tests/reliability/chaos.py), on one two-worker cluster:

1. **fresh start**: the group restarted by hand, then the undisturbed cell: seconds from the
   restart to its first trained batch (what any restart costs before training again);
2. **undisturbed**: its final metrics;
3. **chaos**: the same cell with 3 SIGKILLs at random moments (alternating workers, the second
   during the restart the first caused), ``max_restarts=5``: its final metrics, every restart's
   seconds from the loss to fresh workers (the engine's ``restart_seconds``) and from each kill
   until the next attempt trained its first batch.

    python benchmarks/restarts_chaos.py --repeats 2 [--seed N]

Writes benchmarks/results/restarts_chaos.json.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import ROOT, median, write_result

sys.path.insert(0, str(ROOT))

from mwnotebook import Cluster
from mwnotebook.shared.events import Event, WorkerMetrics
from tests.reliability.chaos import Killer, final_line, fit_cell, loop_cell, random_plan

CELLS = {"fit": (fit_cell, 64), "custom loop": (loop_cell, 8)}


def fresh_start_to_training(cluster: Cluster, cell: str) -> tuple[float, str]:
    """Restart the group by hand, run ``cell``: seconds from the restart to its first batch."""
    first: list[float] = []

    def watch(event: Event) -> None:
        if isinstance(event, WorkerMetrics) and not first and event.records:
            first.append(min(r["time"] for r in event.records))

    began = time.time()
    cluster.restart()
    result = cluster.run(cell, on_event=watch, timeout=600)
    return round(first[0] - began, 2), final_line(result.stdout(0))


def chaos(cluster: Cluster, cell: str, steps: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    killer = Killer(cluster, random_plan(rng, steps), rng)
    result = cluster.run(cell, on_event=killer, timeout=600, max_restarts=5)
    return {"seed": seed, "final": [final_line(result.stdout(i)) for i in range(2)],
            "kills": [(k.worker, k.when) for k in killer.kills],
            "restart_seconds": [round(r.restart_seconds, 2) for r in result.restarts],
            "kill_to_training_seconds": killer.kill_to_training(),
            "restart_lines": [r.summary() for r in result.restarts],
            "marks": len(killer.store.restart_marks())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None, help="first random seed (default: random)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in CELLS}
    load_before = os.getloadavg()
    with Cluster(workers=2, cpu=True) as cluster, tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name, (make, steps) in CELLS.items():
                base = f"{tmp}/{name.replace(' ', '-')}-{repeat}"
                fresh, _ = fresh_start_to_training(cluster, make(f"{base}-fresh"))
                undisturbed = cluster.run(make(f"{base}-calm"), timeout=600)
                row = {"fresh_start_to_training_seconds": fresh,
                       "undisturbed_final": [final_line(undisturbed.stdout(i)) for i in range(2)],
                       **chaos(cluster, make(f"{base}-chaos"), steps, seed + repeat)}
                row["identical"] = row["final"] == row["undisturbed_final"]
                rows[name].append(row)
                print(name, repeat, row, flush=True)
    summary = {name: {"identical": all(r["identical"] for r in runs),
                      "median_restart_seconds": median([s for r in runs for s in r["restart_seconds"]]),
                      "median_kill_to_training_seconds": median([s for r in runs for s in r["kill_to_training_seconds"]]),
                      "median_fresh_start_to_training_seconds": median([r["fresh_start_to_training_seconds"]
                                                                        for r in runs])}
               for name, runs in rows.items()}
    path = write_result("restarts_chaos", {"commit": commit, "command": " ".join(sys.argv),
                                           "load_average_before": load_before, "load_average_after": os.getloadavg(),
                                           "summary": summary, "runs": rows})
    print(summary)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
