"""Earlier runs of a cell in the live chart, in a real JupyterLab 4 and a real Notebook 7 (headless
Chromium): the same small 2-worker ``model.fit`` cell runs three times in one kernel.

Run 1 draws no earlier run. The same cell run again (run 2) draws run 1 faintly in every plot,
labelled "run N" on the canvas, with a toggle and a picker in the legend; its saved picture shows
run 2 only. Then the same notebook cell is edited in the page as a user would (``--compare-saved``
typed on the magic line, a line added to the code, so its text is no longer run 1's and 2's: only the
cell id the front end sends makes it the same cell) and run 3 draws runs 2 and 1, the picker shows
one of them, the toggle hides both, and its saved picture keeps them. The checks read the widget's own view state
(``el.mwView()``: what uPlot was given to draw, which labels were painted on the canvas) while the
run is held at a gate (a file the test removes: the workers wait for it in epoch 2, at most 120 s),
so the interaction never races the end of the run. Screenshots go to ``artifacts/``.

Cost: ~1 min per front end (one 2-worker cluster, three runs of 2 short epochs), under load 2-4.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest

from testbed import widget_page as wp
from testbed.jupyter_lab import Lab

pytestmark = [pytest.mark.browser, pytest.mark.tf, pytest.mark.slow]

BODY = '''import os, time
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 8)).astype("float32")
y = (x[:, :1] - x[:, 1:2] > 0).astype("float32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)
val = tf.data.Dataset.from_tensor_slices((x[:256], y[:256])).batch(32).with_options(options)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="binary_crossentropy", metrics=["accuracy"])

class Gate(tf.keras.callbacks.Callback):  # the test holds the run in epoch 2 while {gate!r} exists
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.02)
        if self.epoch == 1 and batch == 12:
            end = time.monotonic() + 120
            while os.path.exists({gate!r}) and time.monotonic() < end:
                time.sleep(0.05)

model.fit(train, epochs=2, validation_data=val, callbacks=[Gate()], verbose=0)
print("trained")
'''


@pytest.fixture(params=["lab", "notebook7"])
def server(request) -> Lab:
    return request.getfixturevalue(request.param)


def _cell(page, index: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def _run(page, index: int, deadline_s: float = 120.0) -> None:
    """Run cell ``index`` (again): wait until its prompt shows ``*`` or a number it did not show before."""
    before = wp.prompts(page)[index]
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if not wp.click_cell(page, index, ".jp-Notebook .jp-Cell .jp-InputArea-editor"):
            continue
        page.keyboard.press("Shift+Enter")
        tried = time.monotonic()
        while time.monotonic() - tried < 60:
            prompt = wp.prompts(page)[index]
            if prompt != before and ("*" in prompt or any(ch.isdigit() for ch in prompt)):
                return
            time.sleep(0.2)
    raise AssertionError(f"cell {index} never started; prompts: {wp.prompts(page)}")


def _wait_done(page, index: int) -> None:
    deadline = time.monotonic() + 300  # hang bound: two shared cores
    while not wp.cell_done(page, index) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert wp.cell_done(page, index), wp.cell_text(page, index)[-2000:]
    assert "trained" in wp.cell_text(page, index), wp.cell_text(page, index)[-2000:]


def _edit(page, index: int) -> None:
    """Edit cell ``index`` in the page as a user would: ``--compare-saved`` at the end of its magic line
    and a line more at the end of its code (its text changes; its cell id does not)."""
    assert wp.click_cell(page, index, ".jp-Notebook .jp-Cell .jp-InputArea-editor"), "the click did not land"
    page.keyboard.press("Control+Home")
    page.keyboard.press("End")
    page.keyboard.type(" --compare-saved")
    page.keyboard.press("Control+End")
    page.keyboard.press("Enter")
    page.keyboard.type("print('edited in the page')")
    source = _cell(page, index).locator(".jp-InputArea-editor").inner_text()
    assert "--compare-saved" in source and "edited in the page" in source, source[-500:]


def _held(page, index: int, earlier: int) -> dict:
    """The view state once the run is held at the gate with its loss, accuracy and val_loss plots."""
    try:
        return wp.wait_state(page, index, lambda s: {"loss", "accuracy", "val_loss"} <= {p["metric"] for p in s["plots"]}
                             and min(wp.plot(s, "loss")["points"]) >= 40
                             and all(len(p["earlier"]) == earlier for p in s["plots"]),
                             240, f"a live chart with {earlier} earlier run(s) in every plot")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ncell output: {wp.cell_text(page, index)[-3000:]}") from None


def _saved_picture_text(page, index: int) -> str:
    """The text of the cell's picture kept at its end (plotly's legend, or the SVG picture's)."""
    picture = _cell(page, index).locator(".js-plotly-plot, .mw-static-chart").first
    picture.wait_for(timeout=60_000)
    assert _cell(page, index).locator(wp.WIDGET).count() == 0, "widget left behind"
    page.wait_for_timeout(500)
    return picture.text_content() or ""


def _notebook(server: Lab, gate: Path) -> str:
    body = BODY.format(gate=str(gate))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in ("%load_ext mwnotebook", "%%mwtrain --workers 2 --cpu\n" + body)]
    name = f"overlay_{server.app}.ipynb"
    nbformat.write(nb, server.root / name)
    return name


def test_earlier_runs_drawn_faintly_with_a_toggle_and_a_picker(server: Lab, page, artifacts_dir):
    tag = server.app
    gate = server.root / "hold_the_run"
    gate.unlink(missing_ok=True)
    name = _notebook(server, gate)
    page.set_viewport_size({"width": 1280, "height": 2000})  # the whole chart in view for its screenshots
    page.goto(server.notebook_url(name))
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    wp.run_cell(page, 0)
    page.wait_for_function("() => /[0-9]/.test(document.querySelectorAll('.jp-Cell .jp-InputPrompt')[0].textContent)",
                           timeout=90_000)

    # run 1: nothing earlier to draw
    _run(page, 1)
    first = wp.wait_state(page, 1, lambda s: any(p["metric"] == "loss" for p in s["plots"]), 240, "run 1's chart")
    assert first["earlier"]["runs"] == [] and _cell(page, 1).locator(".mw-earlier-pick").count() == 0
    _wait_done(page, 1)

    # run 2, the same cell again: run 1 faint in every plot, labelled on the canvas
    gate.touch()
    try:
        _run(page, 1)
        st = _held(page, 1, earlier=1)
        [run1] = st["earlier"]["runs"]
        assert st["earlier"]["shown"] == [run1]
        for p in st["plots"]:
            [line] = p["earlier"]
            assert line["run"] == run1 and line["shown"] and line["points"] >= 2 and line["drawn"] is not None, p
            assert p["labels"] == [f"run {run1}"], p
        assert len(wp.plot(st, "loss")["shown"]) == 2 * 3 + 1, "workers' raw and main lines, then run 1"
        chips = _cell(page, 1).locator(".mw-earlier-chip").all_inner_texts()
        assert [c.strip() for c in chips] == [f"run {run1}"], chips
        wp.screenshot(page, 1, artifacts_dir / f"overlay_{tag}_run2.png", wp.WIDGET)
        toggle = _cell(page, 1).locator("input.mw-earlier-toggle")
        toggle.uncheck()
        off = wp.wait_state(page, 1, lambda s: not s["earlier"]["on"], 10, "the toggle hides run 1")
        assert off["earlier"]["shown"] == [] and all(p["labels"] == [] for p in off["plots"]), off
        assert all(line["shown"] is False for p in off["plots"] for line in p["earlier"])
        toggle.check()
        wp.wait_state(page, 1, lambda s: s["earlier"]["shown"] == [run1], 10, "and shows it again")
        assert not wp.cell_done(page, 1), "checked while the run is held"
    finally:
        gate.unlink(missing_ok=True)
    _wait_done(page, 1)
    assert "earlier" not in _saved_picture_text(page, 1), "the saved picture shows this run only by default"

    # run 3, the same cell edited in the page (--compare-saved, and a line more in its code): runs 2
    # and 1, the picker shows one, the saved picture keeps both
    _edit(page, 1)
    gate.touch()
    try:
        _run(page, 1)
        st = _held(page, 1, earlier=2)
        run2, older = st["earlier"]["runs"]
        assert older == run1 and run2 > run1, st["earlier"]
        assert wp.plot(st, "loss")["labels"] == [f"run {run2}", f"run {run1}"]
        wp.screenshot(page, 1, artifacts_dir / f"overlay_{tag}.png", wp.WIDGET)
        picker = _cell(page, 1).locator("select.mw-earlier-pick")
        picker.select_option(str(run1))
        one = wp.wait_state(page, 1, lambda s: s["earlier"]["picked"] == run1, 10, f"the picker shows run {run1}")
        assert one["earlier"]["shown"] == [run1]
        for p in one["plots"]:
            assert [line["shown"] for line in p["earlier"]] == [False, True], p
            assert p["labels"] == [f"run {run1}"], p
        wp.screenshot(page, 1, artifacts_dir / f"overlay_{tag}_picked.png", wp.WIDGET)
        picker.select_option("all")
        both = wp.wait_state(page, 1, lambda s: s["earlier"]["picked"] == "all", 10, "the picker shows all")
        assert both["earlier"]["shown"] == [run2, run1]
        _cell(page, 1).locator("input.mw-earlier-toggle").uncheck()
        off = wp.wait_state(page, 1, lambda s: not s["earlier"]["on"], 10, "the toggle hides both")
        assert off["earlier"]["shown"] == [] and all(p["labels"] == [] for p in off["plots"]), off
        assert not wp.cell_done(page, 1), "checked while the run is held"
    finally:
        gate.unlink(missing_ok=True)
    _wait_done(page, 1)
    kept = _saved_picture_text(page, 1)
    assert f"run {run2} (earlier)" in kept and f"run {run1} (earlier)" in kept, kept[-1500:]
