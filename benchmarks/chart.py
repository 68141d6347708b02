"""What the live chart costs: fast training with the chart widget vs without, and the browser's side.

    python -m benchmarks.chart widget [--steps 10000] [--repeats 5] [--workers 8]
    python -m benchmarks.chart browser [--seconds 10] [--repeats 2]

``widget`` -- a notebook kernel (jupyter_client, as a user's notebook) runs ``%%mwtrain --workers N``
cells. Each worker trains a tiny numpy logistic regression (one SGD step on a 32 x 8 batch: tens of
microseconds, so >= 1,000 steps per second per worker) and calls ``mw.report(step, loss=...,
accuracy=..., global_loss=...)`` every step. Alternating, in one run: ``no_dashboard``
(``--no-dashboard``, reports still sent), ``widget`` (the live widget at the first metric),
``no_report`` (diagnostic: ``--no-dashboard``, no ``mw.report`` at all). The loop's wall time is the
slowest worker's (its own ``perf_counter``); the ratio is widget / no_dashboard, as medians and as the
median of each adjacent pair. The widget's updates are counted as the notebook kernel sent them
(``comm_msg`` with ``method: custom``: JSON content + buffers), and the notebook kernel's CPU.

``browser`` -- real JupyterLab + Debian's headless Chromium (as tests/browser). One notebook kernel
runs, alternately, two cells that do what a training cell's output does for ``--seconds``: a progress
line (a display updated in place 10 times a second, like a worker's Keras bar), and from the 2nd
second on a two-trace loss chart updated 5 times a second: ``plotly`` (a plotly ``FigureWidget``,
what the dashboard was first) or ``dashboard`` (:class:`mwnotebook.dashboard.Dashboard` fed
``WorkerMetrics`` events, what ``%%mwtrain`` shows). In the page: how many progress-line updates are
drawn and the longest time the line stands still, main-thread long tasks (> 50 ms), and how long
after it was sent the chart is first drawn. No TensorFlow.

Writes benchmarks/results/chart/<commit>.json. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat
import psutil

from benchmarks._suite import Run, start_kernel, stop_kernel
from testbed.jupyter_lab import CHROMIUM, CHROMIUM_ARGS, start_lab, stop_lab

log = logging.getLogger("benchmarks.chart")

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


def widget(steps: int, repeats: int, n: int) -> dict[str, Any]:
    km, client = start_kernel()
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
        for _ in range(repeats):
            for mode, flag, report in modes:
                before = sum(notebook.cpu_times()[:2])
                cell = run_cell(client, LOOP.format(workers=n, flag=flag, steps=steps, report=report))
                samples[mode].append(loop_seconds(cell["stdout"], n))
                notebook_cpu[mode].append(sum(notebook.cpu_times()[:2]) - before)
                if mode == "widget":
                    updates.extend(cell["updates"])
                    opened.extend(cell["opened"])
                log.info("%13s: loop %.3f s (%.0f steps/s per worker)", mode, samples[mode][-1],
                         steps / samples[mode][-1])
        run_cell(client, "%mwcluster stop")
    finally:
        stop_kernel(km, client)
    base, shown = statistics.median(samples["no_dashboard"]), statistics.median(samples["widget"])
    result = {
        "workers": n, "steps": steps, "repeats": repeats, "loop_seconds": samples,
        "steps_per_s_per_worker_median": {m: steps / statistics.median(v) for m, v in samples.items()},
        "wall_time_ratio_widget_vs_no_dashboard": shown / base,
        "wall_time_ratio_median_of_pairs": statistics.median(
            a / b for a, b in zip(samples["widget"], samples["no_dashboard"])),
        "wall_time_ratio_no_dashboard_vs_no_report": base / statistics.median(samples["no_report"]),
        "notebook_kernel_cpu_seconds_per_cell_median": {m: statistics.median(v) for m, v in notebook_cpu.items()},
        "widget_comm_open_bytes": max(opened, default=0),
        "widget_updates": len(updates),
        "widget_update_bytes_median": statistics.median(updates) if updates else 0,
        "widget_update_bytes_max": max(updates, default=0),
    }
    log.info("widget / --no-dashboard: %.3f median, %.3f median of pairs; %.0f steps/s per worker; "
             "widget updates %d, median %.0f B, max %d B", result["wall_time_ratio_widget_vs_no_dashboard"],
             result["wall_time_ratio_median_of_pairs"], result["steps_per_s_per_worker_median"]["widget"],
             len(updates), result["widget_update_bytes_median"], result["widget_update_bytes_max"])
    return result


CELL = '''import math, time
from IPython.display import display
VARIANT, SECONDS = {variant!r}, {seconds}
line = display({{"text/html": "<pre>starting</pre>"}}, raw=True, display_id=True)
chart = None
t0 = time.time()
i = 0
while time.time() - t0 < SECONDS:
    i += 1
    now = time.time()
    line.update({{"text/html": f"<pre class='bench-line' data-v='{{VARIANT}}' data-i='{{i}}' "
                              f"data-t='{{now * 1000:.1f}}'>step {{i}}</pre>"}}, raw=True)
    if chart is None and now - t0 > 2:
        if VARIANT == "plotly":
            import plotly.graph_objects as go
            chart = go.FigureWidget(data=[go.Scatter(x=[], y=[], mode="lines") for _ in range(2)])
            display(chart)
        else:
            from mwnotebook.dashboard import Dashboard
            from mwnotebook.shared.events import WorkerMetrics
            chart = Dashboard(2)
            chart.display()
        chart_shown = now
    if chart is not None:
        if VARIANT == "plotly":
            if i % 2 == 0:
                with chart.batch_update():
                    for w, trace in enumerate(chart.data):
                        trace.x = list(range(i))
                        trace.y = [math.exp(-k / 50) + 0.1 * w for k in range(i)]
        else:
            for w in range(2):
                chart(WorkerMetrics(w, ({{"step": i, "loss": math.exp(-i / 50) + 0.1 * w, "time": now}},)))
    time.sleep(0.1)
print("CHART_SHOWN", chart_shown * 1000)
'''

INIT = r"""
(() => {
  window.__bench = {lines: [], long: [], charts: []};
  const now = () => performance.timeOrigin + performance.now();
  try {
    new PerformanceObserver(l => l.getEntries().forEach(e =>
      window.__bench.long.push([performance.timeOrigin + e.startTime, e.duration]))).observe({type: 'longtask'});
  } catch (e) {}
  const seen = new Set();
  const observer = new MutationObserver(() => {
    const t = now();
    document.querySelectorAll('.bench-line').forEach(e => {
      const key = e.dataset.v + e.dataset.t;
      if (!seen.has(key)) { seen.add(key); window.__bench.lines.push([e.dataset.v, +e.dataset.t, t]); }
    });
    document.querySelectorAll('.js-plotly-plot, .mw-live-chart').forEach(e => {
      if (!e.__benchSeen) { e.__benchSeen = true; window.__bench.charts.push(t); }
    });
  });
  document.addEventListener('DOMContentLoaded', () =>
    observer.observe(document.body, {subtree: true, childList: true, characterData: true}));
})();
"""


def _wait_idle_prompt(page, index: int, timeout_s: float) -> None:
    page.wait_for_function(
        f"() => {{ const p = document.querySelectorAll('.jp-Cell .jp-InputPrompt')[{index}].textContent;"
        f" return /[0-9]/.test(p) && !p.includes('*'); }}", timeout=timeout_s * 1000)


def _run(page, index: int) -> None:
    page.locator(".jp-Cell .jp-InputArea-editor").nth(index).click()
    page.keyboard.press("Shift+Enter")


def browser(seconds: float, repeats: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    variants = ["dashboard", "plotly"] * repeats
    with tempfile.TemporaryDirectory(prefix="chart-bench-") as tmp:
        root = Path(tmp)
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell("import mwnotebook.dashboard, plotly.graph_objects; print('ready')")]
        nb.cells += [nbformat.v4.new_code_cell(CELL.format(variant=v, seconds=seconds)) for v in variants]
        nbformat.write(nb, root / "bench.ipynb")
        lab = start_lab(root)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.add_init_script(INIT)
                page.goto(lab.notebook_url("bench.ipynb"))
                page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
                time.sleep(2)
                _run(page, 0)
                _wait_idle_prompt(page, 0, 120)
                runs = []
                for index, variant in enumerate(variants, start=1):
                    page.evaluate("() => { window.__bench = {lines: [], long: [], charts: []}; }")
                    _run(page, index)
                    _wait_idle_prompt(page, index, 10 * seconds + 120)
                    time.sleep(1)
                    bench = page.evaluate("() => window.__bench")
                    text = page.locator(".jp-Cell").nth(index).locator(".jp-OutputArea").inner_text()
                    shown = float(re.search(r"CHART_SHOWN ([\d.]+)", text).group(1))  # type: ignore[union-attr]
                    runs.append(_summary(variant, bench, shown))
                    print(json.dumps(runs[-1]), flush=True)
                browser.close()
        finally:
            stop_lab(lab)
    return {"seconds": seconds, "repeats": repeats, "runs": runs}


def _summary(variant: str, bench: dict, chart_sent_ms: float) -> dict:
    lags = [drawn - sent for v, sent, drawn in bench["lines"] if v == variant]
    after = [drawn - sent for v, sent, drawn in bench["lines"] if v == variant and sent >= chart_sent_ms]
    long_ms = [d for t, d in bench["long"]]
    drawn = sorted(d for v, _, d in bench["lines"] if v == variant)
    return {
        "variant": variant,
        "line_updates_drawn": len(lags),
        # the longest time the progress line stood still on the page (it is sent every 0.1 s)
        "line_stall_ms_max": max((b - a for a, b in zip(drawn, drawn[1:])), default=None),
        "line_lag_ms_median": statistics.median(lags) if lags else None,
        "line_lag_ms_max": max(lags) if lags else None,
        "line_lag_ms_max_after_chart": max(after) if after else None,
        "chart_drawn_after_ms": (min(bench["charts"]) - chart_sent_ms) if bench["charts"] else None,
        "long_tasks": len(long_ms),
        "long_task_ms_total": sum(long_ms),
        "long_task_ms_max": max(long_ms, default=0.0),
    }


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("widget", "browser"))
    parser.add_argument("--repeats", type=int, default=None, help="widget: 5, browser: 2")
    parser.add_argument("--steps", type=int, default=10_000, help="widget: steps per cell")
    parser.add_argument("--workers", type=int, default=8, help="widget: workers")
    parser.add_argument("--seconds", type=float, default=10.0, help="browser: seconds per cell")
    args = parser.parse_args()
    run = Run("chart")
    if args.part == "widget":
        results = {"widget": widget(args.steps, args.repeats or 5, args.workers)}
    else:
        results = {"browser": browser(args.seconds, args.repeats or 2)}
        for variant in ("plotly", "dashboard"):
            runs = [r for r in results["browser"]["runs"] if r["variant"] == variant and r["line_updates_drawn"]]
            if runs:
                log.info("%9s: progress line drawn %.0f of ~%.0f updates, stood still up to %.0f ms; chart drawn "
                         "%.0f ms after it was sent; main-thread long tasks %.0f ms in all (longest %.0f ms)",
                         variant, statistics.median(r["line_updates_drawn"] for r in runs), 10 * args.seconds,
                         statistics.median(r["line_stall_ms_max"] or 0 for r in runs),
                         statistics.median(r["chart_drawn_after_ms"] or 0 for r in runs),
                         statistics.median(r["long_task_ms_total"] for r in runs),
                         statistics.median(r["long_task_ms_max"] for r in runs))
    log.info("written to %s", run.write(results))


if __name__ == "__main__":
    main()
