"""What the live chart widget costs fast training: 8 workers reporting every step, widget vs ``--no-dashboard``.

A notebook kernel (jupyter_client, as a user's notebook) runs ``%%mwtrain --workers 8`` cells. Each
worker trains a tiny numpy logistic regression (one SGD step on a 32 x 8 batch: tens of
microseconds, so >= 1,000 steps per second per worker) and calls ``mw.report(step, loss=...,
accuracy=..., global_loss=...)`` every step. Alternating, in one run:

* ``no_dashboard``: ``%%mwtrain --workers 8 --no-dashboard``, the same loop (reports still sent);
* ``widget``: ``%%mwtrain --workers 8``: the live widget at the first metric;
* ``no_report`` (diagnostic): ``--no-dashboard``, no ``mw.report`` at all.

The loop's wall time is the slowest worker's (its own ``perf_counter``); the ratio is widget /
no_dashboard, as medians and as the median of each adjacent pair. The widget's updates are counted
as the notebook kernel sent them (``comm_msg`` with ``method: custom``: JSON content + buffers).

Usage: python benchmarks/widget_overhead.py [--steps 10000] [--repeats 5] [--workers 8]
Writes benchmarks/results/widget_overhead.json. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path

import psutil
from jupyter_client.manager import start_new_kernel

log = logging.getLogger("widget_overhead")
RESULTS = Path(__file__).resolve().parent / "results" / "widget_overhead.json"

SETUP = '''%%mwtrain --workers {workers} --no-dashboard
import time
import numpy as np
import mwnotebook.worker as mw

rng = np.random.default_rng(0)
X = rng.normal(size=(32, 8))
Y = (X[:, 0] > 0).astype(float)

def train(steps, report):
    w = np.zeros(8)
    start = time.perf_counter()
    for step in range(steps):
        p = 1 / (1 + np.exp(-X @ w))
        w -= 0.1 * X.T @ (p - Y) / 32
        if report:
            loss = float(-np.mean(Y * np.log(p + 1e-9) + (1 - Y) * np.log(1 - p + 1e-9)))
            mw.report(step=step, loss=loss, accuracy=float(np.mean((p > 0.5) == Y)), global_loss=loss)
    print("LOOP", time.perf_counter() - start)

train(200, False)
print("ready")
'''
LOOP = '''%%mwtrain --workers {workers}{flag}
train({steps}, {report})
'''


def run_cell(client, code: str, timeout: float = 900) -> dict:
    msg_id = client.execute(code)
    stdout, errors, updates, opened = [], [], [], []
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        kind, content = msg["msg_type"], msg["content"]
        if kind == "comm_open" and "chart_id" in content.get("data", {}).get("state", {}):
            opened.append(len(json.dumps(content)))
        if kind == "comm_msg" and content["data"].get("method") == "custom":
            updates.append(len(json.dumps(content["data"]["content"])) + sum(len(b) for b in msg["buffers"]))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if kind == "stream":
            stdout.append(content["text"])
        elif kind == "error":
            errors.append("\n".join(content["traceback"]))
        elif kind == "status" and content["execution_state"] == "idle":
            break
    client.get_shell_msg(timeout=timeout)
    if errors:
        raise RuntimeError(f"cell failed:\n{errors[0]}")
    return {"stdout": "".join(stdout), "updates": updates, "opened": opened}


def loop_seconds(stdout: str, workers: int) -> float:
    times = [float(t) for t in re.findall(r"^\[worker \d+\] LOOP ([\d.]+)", stdout, re.M)]
    if len(times) != workers:
        raise RuntimeError(f"expected {workers} LOOP lines, got:\n{stdout[-2000:]}")
    return max(times)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    n = args.workers
    km, client = start_new_kernel(kernel_name="python3")
    samples: dict[str, list[float]] = {"no_dashboard": [], "widget": [], "no_report": []}
    updates: list[int] = []
    opened: list[int] = []
    notebook_cpu: dict[str, list[float]] = {mode: [] for mode in samples}
    try:
        run_cell(client, "%load_ext mwnotebook")
        if "ready" not in run_cell(client, SETUP.format(workers=n))["stdout"]:
            raise RuntimeError("set-up failed")
        notebook = psutil.Process(km.provisioner.process.pid)  # the notebook kernel: relay + dashboard
        modes = (("no_dashboard", " --no-dashboard", True), ("widget", "", True),
                 ("no_report", " --no-dashboard", False))
        for _ in range(args.repeats):
            for mode, flag, report in modes:
                before = sum(notebook.cpu_times()[:2])
                cell = run_cell(client, LOOP.format(workers=n, flag=flag, steps=args.steps, report=report))
                samples[mode].append(loop_seconds(cell["stdout"], n))
                notebook_cpu[mode].append(sum(notebook.cpu_times()[:2]) - before)
                if mode == "widget":
                    updates.extend(cell["updates"])
                    opened.extend(cell["opened"])
                log.info("%13s: loop %.3f s (%.0f steps/s per worker)", mode, samples[mode][-1],
                         args.steps / samples[mode][-1])
        run_cell(client, "%mwcluster stop")
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=False)
    base, widget = statistics.median(samples["no_dashboard"]), statistics.median(samples["widget"])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    result = {
        "benchmark": "widget_overhead", "workers": n, "steps": args.steps, "repeats": args.repeats,
        "loop_seconds": samples,
        "steps_per_s_per_worker_median": {m: args.steps / statistics.median(v) for m, v in samples.items()},
        "wall_time_ratio_widget_vs_no_dashboard": widget / base,
        "wall_time_ratio_median_of_pairs": statistics.median(
            a / b for a, b in zip(samples["widget"], samples["no_dashboard"])),
        "wall_time_ratio_no_dashboard_vs_no_report": base / statistics.median(samples["no_report"]),
        "target_ratio": 1.02,
        "notebook_kernel_cpu_seconds_per_cell_median": {m: statistics.median(v) for m, v in notebook_cpu.items()},
        "widget_comm_open_bytes": max(opened, default=0),
        "widget_updates": len(updates),
        "widget_update_bytes_median": statistics.median(updates) if updates else 0,
        "widget_update_bytes_max": max(updates, default=0),
        "commit": commit, "machine": f"{platform.machine()} {platform.python_version()}",
        "load_average_at_end": list(__import__("os").getloadavg()),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    log.info("widget / --no-dashboard: %.3f median, %.3f median of pairs (target <= 1.02); "
             "%.0f steps/s per worker; widget updates %d, median %.0f B, max %d B; wrote %s",
             result["wall_time_ratio_widget_vs_no_dashboard"], result["wall_time_ratio_median_of_pairs"],
             result["steps_per_s_per_worker_median"]["widget"], len(updates),
             result["widget_update_bytes_median"], result["widget_update_bytes_max"], RESULTS)


if __name__ == "__main__":
    main()
