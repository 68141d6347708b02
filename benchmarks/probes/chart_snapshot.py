"""What the earlier-runs overlay costs a cell (frontend/chart/earlier.py): the chart's snapshot made
when a run ends (time, JSON bytes kept in the run history) and what a later run's widget is sent
once (header + float32 buffer), for a Keras-like run: batch records of ``loss`` and ``accuracy``
per worker with their global values, a ``val_loss`` per epoch.

In process, no kernels: the snapshot is taken in the notebook kernel after the run's last event, so
its cost is the function's. Usage:
    python -m benchmarks.probes.chart_snapshot [--steps 1000] [--workers 2 8] [--repeats 20]
Writes benchmarks/results/chart_snapshot/<commit>.json. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from benchmarks._suite import write_result
from mwnotebook.frontend.chart.earlier import earlier_runs, overlay_state
from mwnotebook.frontend.chart.live import Dashboard
from mwnotebook.shared.events import WorkerMetrics


def _run(workers: int, steps: int) -> Dashboard:
    dash = Dashboard(workers, use_widget=False)
    for step in range(steps):
        for w in range(workers):
            loss = 1 / (1 + 0.01 * step) + 0.01 * w
            dash(WorkerMetrics(w, ({"step": step, "kind": "batch", "epoch": step // 100, "loss": loss,
                                    "accuracy": 1 - loss / 2, "global_loss": loss, "global_accuracy": 1 - loss / 2},)))
    for epoch in range(steps // 100):
        dash(WorkerMetrics(0, ({"kind": "epoch", "epoch": epoch, "global_val_loss": 0.5 / (epoch + 1)},)))
    dash.finish()
    return dash


def measure(workers: int, steps: int, repeats: int) -> dict[str, Any]:
    dash = _run(workers, steps)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        snap = dash.snapshot()
        times.append(time.perf_counter() - start)
    assert snap is not None
    kept = len(json.dumps(snap))
    header, data = overlay_state(earlier_runs([(3, snap), (2, snap), (1, snap)]))
    return {"workers": workers, "steps": steps, "metrics": len(snap["plots"]),
            "snapshot_ms_median": round(statistics.median(times) * 1000, 3),
            "snapshot_json_bytes": kept, "overlay_bytes_3_runs": len(data) + len(json.dumps(header))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rows = [measure(w, args.steps, args.repeats) for w in args.workers]
    for row in rows:
        print(row)
    print(write_result("chart_snapshot", {"rows": rows}))


if __name__ == "__main__":
    main()
