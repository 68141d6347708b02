"""What a chart that appears mid-cell costs the browser: plotly's FigureWidget vs the live SVG display.

Real JupyterLab + Debian's headless Chromium (as tests/browser). One notebook kernel runs, side by
side and alternately, two cells that do what a training cell's output does for ``--seconds``:

* a progress line (a display updated in place 10 times a second, like a worker's Keras bar), and
* from the 2nd second on, a two-trace loss chart updated 5 times a second:
  ``widget``: a plotly ``FigureWidget`` (what the dashboard used before), traces set in
  ``batch_update``; ``svg``: :class:`mwnotebook.dashboard.Dashboard` fed ``WorkerMetrics`` events
  (what ``%%mwtrain`` shows now).

In the page: how many progress-line updates are drawn and the longest time the line stands still,
how late each is drawn (kernel send time carried in the line -> DOM), main-thread long tasks
(> 50 ms), and how long after it was sent the chart is first drawn. No TensorFlow.

Usage: python benchmarks/chart_in_browser.py [--seconds 10] [--repeats 2]
Writes benchmarks/results/chart_in_browser.json. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, start_lab, stop_lab  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "chart_in_browser.json"

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
        if VARIANT == "widget":
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
        if VARIANT == "widget":
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


def measure(seconds: float, repeats: int) -> dict:
    from playwright.sync_api import sync_playwright

    variants = ["svg", "widget"] * repeats
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
    return {"seconds": seconds, "repeats": repeats, "runs": runs,
            "load_average": os.getloadavg(), "cpus": os.cpu_count()}


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    result = measure(args.seconds, args.repeats)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    for variant in ("widget", "svg"):
        runs = [r for r in result["runs"] if r["variant"] == variant and r["line_updates_drawn"]]
        print(f"{variant:>6}: progress line drawn {statistics.median(r['line_updates_drawn'] for r in runs):.0f}"
              f" of ~{10 * args.seconds:.0f} updates, stood still up to"
              f" {statistics.median(r['line_stall_ms_max'] for r in runs):.0f} ms;"
              f" chart drawn {statistics.median(r['chart_drawn_after_ms'] for r in runs):.0f} ms after it was sent;"
              f" main-thread long tasks {statistics.median(r['long_task_ms_total'] for r in runs):.0f} ms in all"
              f" (longest {statistics.median(r['long_task_ms_max'] for r in runs):.0f} ms); medians of {len(runs)} runs")
    print(f"load average {result['load_average']}; wrote {RESULTS}")


if __name__ == "__main__":
    main()
