"""Make the documentation's screenshots of the live chart in a real JupyterLab (headless Chromium).

Starts JupyterLab on loopback the way the browser tests do (testbed/jupyter_lab.py), runs a
two-worker ``model.fit`` cell in it, and while the cell runs hovers, zooms, hides a worker and
smooths, taking a picture of the widget after each; then pictures the chart's saved end state and
the cell's labelled output. Writes docs/_static/screenshots/*.png (committed; run this again when
the widget changes). Needs what tests/browser needs: jupyterlab, playwright, /usr/bin/chromium.

Usage: python tools/screenshots.py [--out DIR]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed import widget_page as wp  # noqa: E402 - the suite's way to drive the page
from testbed.jupyter_lab import CHROMIUM, CHROMIUM_ARGS, start_lab, stop_lab  # noqa: E402

log = logging.getLogger("screenshots")

FIT_CELL = wp.fit_cell(epochs=6, pause=0.2)


def shoot(page, path: Path, what: str = wp.WIDGET, max_height: float | None = None) -> None:
    """A picture of ``what`` in the training cell's output; only its top ``max_height`` pixels if given."""
    target = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(what).first
    target.scroll_into_view_if_needed(timeout=10_000)
    box = target.bounding_box()
    if max_height is None or box is None:
        target.screenshot(path=str(path), timeout=20_000)
    else:
        clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], max_height)}
        page.screenshot(path=str(path), clip=clip, timeout=20_000)
    log.info("%s: %.0f kB", path.name, path.stat().st_size / 1e3)


def make(out: Path, work: Path) -> None:
    from playwright.sync_api import sync_playwright

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in ("%load_ext mwnotebook", FIT_CELL)]
    lab = start_lab(work)
    try:
        nbformat.write(nb, lab.root / "chart.ipynb")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 1000})
                page.goto(lab.notebook_url("chart.ipynb"))
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
                wp.run_cell(page, 0)
                page.wait_for_function(
                    "() => /[0-9]/.test(document.querySelectorAll('.jp-Cell .jp-InputPrompt')[0].textContent)",
                    timeout=90_000)
                wp.run_cell(page, 1, retry_s=60.0)
                interact(page, out)
                deadline = time.monotonic() + 300
                while not wp.cell_done(page, 1) and time.monotonic() < deadline:
                    time.sleep(0.3)
                (page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".mw-static-chart, .js-plotly-plot")
                 .first.wait_for(timeout=60_000))
                # tall enough for the whole output, so no part of it is under the notebook's own scrolling
                page.set_viewport_size({"width": 1100, "height": 2600})
                time.sleep(1.5)
                shoot(page, out / "saved-picture.png", ".mw-static-chart, .js-plotly-plot", max_height=520)
                shoot(page, out / "cell-output.png", ".jp-OutputArea", max_height=560)
            finally:
                browser.close()
    finally:
        stop_lab(lab)


def interact(page, out: Path) -> None:
    # hang bounds only: the workers start and import TensorFlow on a shared machine
    wp.wait_state(page, 1, lambda s: {p["metric"] for p in s["plots"]} >= {"loss", "accuracy"}
                  and min(wp.plot(s, "loss")["points"]) >= 40, 300, "live loss and accuracy plots")
    page.mouse.move(0, 0)
    shoot(page, out / "chart-mid-training.png")
    box = wp.overlay_box(page, 1, "loss")
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.5)
    wp.wait_state(page, 1, lambda s: s["hover"] is not None, 10, "hover read-out")
    shoot(page, out / "hover.png")
    page.mouse.move(box["x"] + box["width"] * 0.15, box["y"] + box["height"] * 0.5)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.45, box["y"] + box["height"] * 0.5, steps=6)
    page.mouse.up()
    wp.wait_state(page, 1, lambda s: wp.plot(s, "loss")["zoomed"], 10, "drag zoom")
    page.mouse.move(0, 0)
    shoot(page, out / "zoom.png")
    page.mouse.dblclick(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    wp.wait_state(page, 1, lambda s: not wp.plot(s, "loss")["zoomed"], 10, "zoom reset")
    chip = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".mw-chip[data-series='1']")
    chip.click()
    wp.wait_state(page, 1, lambda s: s["hidden"] == [1], 10, "worker 1 hidden")
    page.mouse.move(0, 0)
    shoot(page, out / "hidden-worker.png")
    chip.click()
    wp.wait_state(page, 1, lambda s: s["hidden"] == [], 10, "worker 1 shown")
    page.locator(".jp-Notebook .jp-Cell").nth(1).locator("input.mw-smoothing").fill("0.9")
    wp.wait_state(page, 1, lambda s: s["smoothing"] == 0.9, 10, "smoothing")
    shoot(page, out / "smoothing.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "_static" / "screenshots")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="tools/screenshots.py: %(message)s")
    if CHROMIUM is None:
        log.error("no Chromium: apt-get install -y chromium (or set MWNOTEBOOK_CHROMIUM)")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mw-screenshots-") as work:
        make(args.out, Path(work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
