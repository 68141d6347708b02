"""A real browser watches Keras ``fit(verbose=1)`` on 2 workers in JupyterLab, live chart on: each
worker's progress bar is one live line that keeps its ``[worker i]`` label and advances while the
epoch runs, and the chart (drawn from the Keras callback added automatically) appears at the first
metric, after the output written before it, and grows while the bars advance. A cell that reports no
metric draws no chart and no status table. Screenshots go to ``artifacts/``."""

from __future__ import annotations

import json
import re
import time

import nbformat
import pytest

from testbed.jupyter_lab import Lab
from testbed.widget_page import any_cell_running, prompts, run_cell, save

pytestmark = [pytest.mark.browser, pytest.mark.tf, pytest.mark.slow]

STEPS = 40
FIT_CELL = f'''%%mwtrain --workers 2 --cpu
import time
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(640, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="sgd", loss="binary_crossentropy", metrics=["accuracy"])
tf.get_logger().setLevel("ERROR")  # no "callback is slow" warning: the sleep is on purpose
slow = tf.keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.1))
print("before the first metric", flush=True)
time.sleep(3)  # output that comes before any metric: no chart yet
model.fit(ds, epochs=3, steps_per_epoch={STEPS}, callbacks=[slow])
'''
WARM_CELL = "%%mwtrain --workers 2 --cpu\nprint('workers ready')"
PLAIN_CELL = '%%mwtrain --workers 2 --cpu\nprint("no metrics in this cell")'

READ_LIVE = """() => Array.from(document.querySelectorAll('.jp-Cell')[2].querySelectorAll('.mw-live-line'))
  .map(e => [e.dataset.worker, e.innerText])"""
# The fit cell's chart: points per worker line of the live picture (or of the static copy), whether
# the status table is there, and whether the output printed before the first metric precedes it.
READ_CHART = """() => {
  const cell = document.querySelectorAll('.jp-Cell')[2];
  const chart = cell.querySelector('.mw-live-widget, .mw-live-chart, .mw-static-chart, .js-plotly-plot');
  const before = Array.from(cell.querySelectorAll('.jp-OutputArea-output'))
    .find(e => e.innerText.includes('before the first metric'));
  let points = chart ? Array.from(chart.querySelectorAll('polyline.mw-series'))
    .filter(p => p.dataset.name.startsWith('worker ')).map(p => p.getAttribute('points').split(' ').length) : [];
  if (chart && chart.mwView) {  // the live widget: its loss plot's points per worker
    const view = chart.mwView(), loss = view.plots.find(p => p.metric === 'loss');
    points = loss ? loss.points.slice(0, view.names.length - 1) : [];
  }
  return {chart: !!chart, points: points, status: !!cell.querySelector('.mw-status'), before: !!before,
          before_first: !!(before && chart && (before.compareDocumentPosition(chart) & Node.DOCUMENT_POSITION_FOLLOWING))};
}"""


def _write_notebook(lab: Lab, name: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cells = ("%load_ext mwnotebook", WARM_CELL, FIT_CELL, PLAIN_CELL, LATE_CELL)
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, lab.root / name)
    return name


def _progress(lines: list, worker: int) -> tuple[int, int] | None:
    """(epoch, step) on ``worker``'s running bar (its last line, ``12/40 [====>...]``), None if
    it has no running bar now. The epoch is the number of bars the worker has drawn so far."""
    mine = [text for w, text in lines if w == str(worker)]
    match = re.search(rf"(\d+)/{STEPS}", mine[-1]) if mine else None
    if match is None or int(match.group(1)) >= STEPS:
        return None
    return len(mine), int(match.group(1))


def _shot(page, path) -> None:
    cell = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea")
    try:
        cell.scroll_into_view_if_needed(timeout=5000)
        cell.screenshot(path=str(path), timeout=10_000)
    except Exception:
        page.screenshot(path=str(path))


def test_each_workers_progress_line_is_live_labelled_and_advances(lab: Lab, page, artifacts_dir):
    name = _write_notebook(lab, "live_progress.ipynb")
    page.goto(lab.notebook_url(name))
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
    run_cell(page, 0)
    page.wait_for_function("() => /[0-9]/.test(document.querySelectorAll('.jp-Cell .jp-InputPrompt')[0].textContent)")
    run_cell(page, 1, retry_s=60.0)
    page.wait_for_function("() => /[0-9]/.test(document.querySelectorAll('.jp-Cell .jp-InputPrompt')[1].textContent)",
                           timeout=240_000)
    run_cell(page, 2, retry_s=60.0)
    start = time.monotonic()
    seen: list[tuple[float, tuple[int, int], tuple[int, int], list, dict]] = []
    shots: list[str] = []
    trace: list = []
    while time.monotonic() - start < 240:
        lines = page.evaluate(READ_LIVE)
        chart = page.evaluate(READ_CHART)
        running = any_cell_running(page)
        p0, p1 = _progress(lines, 0), _progress(lines, 1)
        trace.append((round(time.monotonic() - start, 1), running, lines, chart))
        if running and p0 is not None and p1 is not None:
            seen.append((time.monotonic() - start, p0, p1, lines, chart))
            first = next((s for s in seen if s[4]["points"]), None)
            if ((len(shots) == 0 and chart["points"]) or (len(shots) == 1 and first is not None and p0 > first[1]
                                                         and p1 > first[2] and chart["points"] > first[4]["points"])):
                path = artifacts_dir / f"browser_live_progress_{len(shots) + 1}.png"
                _shot(page, path)
                shots.append(str(path))
        if not running and time.monotonic() - start > 3:
            break
        time.sleep(0.2)
    outputs = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea").inner_html()[-3000:]
    (artifacts_dir / "browser_live_progress_samples.json").write_text(json.dumps(trace, default=str))
    assert not any_cell_running(page), f"the fit cell did not finish: {outputs}"
    # no chart before the first metric: during the 3 s the workers sleep after their first line
    # (no metric can come then), that line is on the page and no chart or status table is
    shown_at = next(t for t, _, _, c in trace if c["before"])
    early = [c for t, running, _, c in trace if running and c["before"] and t < shown_at + 2.0]
    assert len(early) >= 3 and not any(c["chart"] or c["status"] for c in early), trace[:20]
    charted = [c for *_, c in trace if c["chart"]]
    assert charted and all(c["before_first"] for c in charted), "the chart comes after the output before it"
    with_chart = [s for s in seen if s[4]["points"]]
    assert len(shots) == 2, f"no two moments with both bars running and the chart growing: {seen[:5]} {outputs}"
    # both workers had a live, labelled line at once, and it advanced while the chart grew
    first, last = with_chart[0], with_chart[-1]
    assert last[1] > first[1] and last[2] > first[2], (first[:3], last[:3])
    assert len(first[4]["points"]) == 2 and all(b > a for a, b in zip(first[4]["points"], last[4]["points"])), (
        first[4], last[4])
    for _, _, _, lines, _ in seen:
        assert all(text.startswith(f"[worker {w}] ") for w, text in lines), lines
        assert {w for w, _ in lines} >= {"0", "1"}
    # after the cell: one final line per epoch and worker, in place
    final = page.evaluate(READ_LIVE)
    for w in ("0", "1"):
        ends = [text for worker, text in final if worker == w and f"{STEPS}/{STEPS}" in text]
        assert len(ends) == 3, final
    # a cell that reports no metric draws no chart
    cells = page.locator(".jp-Cell")
    run_cell(page, 3, retry_s=60.0)
    page.wait_for_function("() => !document.querySelectorAll('.jp-Cell .jp-InputPrompt')[3].textContent.includes('*')"
                           " && /[0-9]/.test(document.querySelectorAll('.jp-Cell .jp-InputPrompt')[3].textContent)",
                           timeout=60_000)
    plain = cells.nth(3)
    assert "[worker 1] no metrics in this cell" in plain.inner_text(), plain.inner_text()
    assert plain.locator(".js-plotly-plot, .mw-static-chart, .mw-status").count() == 0
    late_lines = _late_output_shows_in_its_cell(page, 4, artifacts_dir)
    # the notebook as JupyterLab saves it holds final states, not frames, and the late lines
    save(page, lab.root / name)
    deadline = time.monotonic() + 15
    saved = ""
    while time.monotonic() < deadline and not all(line in saved for line in late_lines):
        time.sleep(0.5)
        saved = json.dumps(nbformat.read(lab.root / name, as_version=4).cells[4].outputs)
    assert all(line in saved for line in late_lines), saved
    size = (lab.root / name).stat().st_size
    (artifacts_dir / "browser_live_progress_saved_size.json").write_text(json.dumps({"bytes": size}))
    print(f"screenshots: {shots}; saved notebook: {size} bytes; prompts {prompts(page)}")
    assert size < 300_000, size


LATE_CELL = '''%%mwtrain --workers 2 --cpu
import os, threading, time
_w = os.environ["MWNOTEBOOK_WORKER_INDEX"]
def _late():
    time.sleep(3)
    print("late line of worker", _w, flush=True)
threading.Thread(target=_late, daemon=True).start()
print("cell body of worker", _w)
'''


def _late_output_shows_in_its_cell(page, index: int, artifacts_dir) -> list[str]:
    """Run the LATE_CELL at ``index``; its workers' thread lines come 3 s after it returned, and
    JupyterLab shows them in that cell (it keeps a finished cell's request open). Returns them."""
    done = f"() => /[0-9]/.test(document.querySelectorAll('.jp-Cell .jp-InputPrompt')[{index}].textContent)"
    text_of = f"() => document.querySelectorAll('.jp-Cell')[{index}].querySelector('.jp-OutputArea').innerText"
    run_cell(page, index, retry_s=60.0)
    page.wait_for_function(done, timeout=60_000)
    count = prompts(page)[index].strip("[]: ")
    assert "late line" not in page.evaluate(text_of)  # printed 3 s after the cell returned
    wanted = [f"[worker {w}, after cell {count}] late line of worker {w}" for w in (0, 1)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(line in page.evaluate(text_of) for line in wanted):
        time.sleep(0.3)
    page.locator(".jp-Cell").nth(index).locator(".jp-OutputArea").screenshot(
        path=str(artifacts_dir / "browser_late_output.png"))
    text = page.evaluate(text_of)
    assert all(line in text for line in wanted), text
    return wanted
