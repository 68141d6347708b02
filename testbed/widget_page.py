"""Driving a notebook page with the live chart widget: cells, the widget's view state, websocket frames.

Works in JupyterLab 4 and Notebook 7 (both draw cells with the same ``.jp-*`` components).
"""

from __future__ import annotations

import json
import logging
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
WIDGET = ".mw-live-widget"

STATE = """(cell) => {
  const el = document.querySelectorAll('.jp-Notebook .jp-Cell')[cell].querySelector('.mw-live-widget');
  return el ? el.mwView() : null;
}"""


_FIT_CELL = '''%%mwtrain --workers 2 --cpu
import time
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
    model.compile(optimizer=tf.keras.optimizers.SGD({rate}), loss="binary_crossentropy", metrics=["accuracy"])

class Slow(tf.keras.callbacks.Callback):  # slow enough for a person (and a test) to interact
    def on_train_batch_end(self, batch, logs=None):
        time.sleep({pause})

model.fit(train, epochs={epochs}, validation_data=val, callbacks=[Slow()], verbose=0)
print("trained")
'''
#: A learning rate that decays each step: the schedule's ``lr`` gets a chart plot of its own.
DECAYING_RATE = "tf.keras.optimizers.schedules.ExponentialDecay(0.3, decay_steps=64, decay_rate=0.7)"


def fit_cell(epochs: int, pause: float, rate: str = "0.1") -> str:
    """A 2-worker tf_keras ``model.fit(..., validation_data=...)`` with ``metrics=["accuracy"]`` for
    ``epochs``, sleeping ``pause`` s after each batch (time to hover, zoom and smooth while it runs);
    ``rate``: the SGD learning rate (a number, or :data:`DECAYING_RATE`). Prints "trained" at the end."""
    return _FIT_CELL.format(rate=rate, pause=pause, epochs=epochs)


def prompts(page) -> list[str]:
    return page.eval_on_selector_all(".jp-Notebook .jp-Cell .jp-InputPrompt", "els => els.map(e => e.textContent)")


def any_cell_running(page) -> bool:
    """Some cell of the page still runs (its prompt shows ``[*]``)."""
    return any("*" in p for p in prompts(page))


def run_cell(page, index: int, deadline_s: float = 90.0, retry_s: float = 8.0) -> None:
    """Run cell ``index``; wait until the kernel took it (its prompt shows ``*`` or a number). A run
    before the kernel is connected is dropped silently, so retry (idempotent cells only: a long
    ``retry_s`` for the others)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if not click_cell(page, index, ".jp-Notebook .jp-Cell .jp-InputArea-editor"):
            continue
        page.keyboard.press("Shift+Enter")
        tried = time.monotonic()
        while time.monotonic() - tried < retry_s:
            prompt = prompts(page)[index]
            if "*" in prompt or any(ch.isdigit() for ch in prompt):
                return
            time.sleep(0.2)
    raise AssertionError(f"cell {index} never started; prompts: {prompts(page)}")


def save(page, path, timeout_s: float = 30.0) -> None:
    """Save the notebook with Ctrl+S and wait until ``path`` was written after the key press.

    Reading the file is not enough: JupyterLab also saves on its own every two minutes, and such an
    autosave taken while the cell ran can already hold a cell's last line but not its end state. A
    key press the page did not take (focus elsewhere, under load) is pressed again. Returns once the
    file is whole again.
    """
    target = Path(path)
    pressed = time.time()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + timeout_s
    again = time.monotonic() + 5
    while target.stat().st_mtime < pressed or not _complete_json(target):
        if time.monotonic() > deadline:
            raise AssertionError(f"{target} was not saved within {timeout_s} s of Ctrl+S")
        if time.monotonic() > again:
            page.keyboard.press("Control+s")
            again = time.monotonic() + 5
        time.sleep(0.2)


def _complete_json(path: Path) -> bool:
    """The server writes a notebook in place (truncate, then write): a read in between finds ''."""
    try:
        json.loads(path.read_text())
    except ValueError:
        return False
    return True


def click_cell(page, index: int, selector: str) -> bool:
    """Click into cell ``index``'s editor, accepting a dialog that covers it (it can open at any
    moment while the server is slow: checked before and after); False when the click did not land."""
    dismiss_dialog(page)
    try:
        page.locator(selector).nth(index).click(timeout=10_000)
    except Exception as exc:  # a dialog opened just now (Playwright: "... intercepts pointer events")
        log.warning("click on cell %d did not land (%s): retrying", index, str(exc).splitlines()[0])
        dismiss_dialog(page)
        return False
    return True


def dismiss_dialog(page) -> None:
    """Accept a dialog the page opened (e.g. the kernel choice, shown when the server is slow to list
    kernels), saying what it was."""
    dialog = page.locator(".jp-Dialog")
    if dialog.count():
        log.warning("dialog in the page: %s", dialog.first.inner_text()[:300])
        page.locator(".jp-Dialog .jp-mod-accept").first.click()
        time.sleep(0.5)


def cell_done(page, index: int) -> bool:
    return any(ch.isdigit() for ch in prompts(page)[index])


def cell_text(page, index: int) -> str:
    return page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea").inner_text()


def state(page, cell: int) -> dict[str, Any] | None:
    return page.evaluate(STATE, cell)


def wait_state(page, cell: int, check, timeout_s: float, what: str) -> dict[str, Any]:
    """Poll the widget's view state until ``check(state)``; hang bound only (a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = state(page, cell)
        if last is not None and check(last):
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: not seen in {timeout_s} s; last state: {last}")


def plot(st: dict[str, Any], metric: str) -> dict[str, Any]:
    for p in st["plots"]:
        if p["metric"] == metric:
            return p
    raise AssertionError(f"no {metric} plot in {[p['metric'] for p in st['plots']]}")


def overlay_box(page, cell: int, metric: str) -> dict[str, float]:
    over = page.locator(".jp-Notebook .jp-Cell").nth(cell).locator(f".mw-plot[data-metric='{metric}'] .u-over")
    over.scroll_into_view_if_needed(timeout=10_000)  # the notebook scrolls inside its own panel
    box = over.bounding_box()
    assert box is not None, f"no {metric} plot drawn"
    return box


@dataclass
class Frames:
    """Every websocket frame the page received: (time.time(), size, text of its JSON parts)."""

    frames: list[tuple[float, int, str]] = field(default_factory=list)

    def attach(self, page) -> None:
        def on_socket(ws) -> None:
            ws.on("framereceived", lambda payload: self._add(payload))

        page.on("websocket", on_socket)

    def _add(self, payload: Any) -> None:
        data = payload.encode() if isinstance(payload, str) else bytes(payload)
        self.frames.append((time.time(), len(data), data.decode("latin-1")))

    def widget_open(self) -> tuple[float, int, str]:
        """The live chart's ``comm_open`` (time, size, comm id)."""
        for stamp, size, text in self.frames:
            if "comm_open" in text and "chart_id" in text:
                comm = re.search(r'"comm_id":\s*"([0-9a-f]+)"', text)
                assert comm, text[:500]
                return stamp, size, comm.group(1)
        raise AssertionError("no comm_open of the live chart on the websocket")

    def updates(self, comm_id: str) -> list[int]:
        """Sizes of the frames that carried the chart's custom messages (its updates)."""
        return [size for _t, size, text in self.frames
                if comm_id in text and "comm_msg" in text and re.search(r'"method":\s*"custom"', text)]

    def closed(self, comm_id: str) -> bool:
        """Whether the kernel closed the chart's comm (nothing of the widget is left to save)."""
        return any(comm_id in text and "comm_close" in text for _t, _s, text in self.frames)

    def budget(self, since: float, until: float) -> dict[str, Any]:
        opened, first, comm = self.widget_open()
        sizes = self.updates(comm)
        during = [size for t, size, _ in self.frames if since <= t <= until]
        return {"first_message_bytes": first, "updates": len(sizes),
                "median_update_bytes": statistics.median(sizes) if sizes else None,
                "largest_update_bytes": max(sizes, default=None),
                "largest_frame_bytes_during_run": max(during, default=None), "frames_during_run": len(during),
                "comm_open_time": opened}


def screenshot(page, cell: int, path, what: str = ".jp-OutputArea") -> None:
    """The cell's outputs, or ``what`` in them (an artifact, never the verdict)."""
    outputs = page.locator(".jp-Notebook .jp-Cell").nth(cell).locator(what).first
    try:
        outputs.scroll_into_view_if_needed(timeout=5000)
        outputs.screenshot(path=str(path), timeout=10_000)
    except Exception:
        page.screenshot(path=str(path))
