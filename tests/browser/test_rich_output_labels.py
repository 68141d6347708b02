"""A real browser, in a real JupyterLab 4 and a real Notebook 7, shows whose each worker's rich
output is: two workers each ``plt.show()`` a figure of their own, then one figure and one HTML
table that are the same on both, then an HTML table of their own.

Seen on the page: every figure and table right after a visible label (``[worker 0]``,
``[worker 1]``), the shared figure and table once, labelled ``[all 2 workers]``. Seen in the file
the front end saves: valid nbformat, the same labels right before the same outputs, the shared
image stored once; and the same in nbconvert's HTML export of that file (a static view, as a
notebook viewer shows it). Screenshots go to ``artifacts/``.
"""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path

import nbformat
import pytest

from testbed.jupyter_lab import CHROMIUM, CHROMIUM_ARGS, Lab
from testbed.modules import require
from testbed.widget_page import prompts, run_cell, save

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RICH_CELL = '''%%mwtrain --workers 2 --cpu
import os
import re
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display
w = int(os.environ["MWNOTEBOOK_WORKER_INDEX"])
fig, ax = plt.subplots(figsize=(3, 3), dpi=80)  # square: this worker's own figure
ax.plot([0, 1, 2], [0, 3 * w + 1, 0], color="C%d" % w)
ax.set_title(f"own figure of worker {w}")
plt.show()
fig, ax = plt.subplots(figsize=(6, 2), dpi=80)  # wide: the same on both workers
ax.plot([0, 1, 2], [2, 1, 2])
ax.set_title("the same figure on every worker")
plt.show()
display(pd.DataFrame({"shared": ["same table", "on every worker"]}))
display(pd.DataFrame({"own": [f"table of worker {w}"]}))
'''

# Every output of the rich cell in page order: a label (its text, its workers, whether it is drawn),
# a picture (wide or square as decoded, its source's length and tail, whether it is drawn), a table (its text).
READ_OUTPUTS = """() => {
  const cell = document.querySelectorAll('.jp-Cell')[1];
  return Array.from(cell.querySelectorAll('.jp-OutputArea-output')).map(o => {
    const label = o.querySelector('.mw-rich-label');
    if (label) {
      const box = label.getBoundingClientRect();
      return {kind: 'label', text: label.innerText.trim(), workers: label.dataset.workers,
              shown: box.height > 0 && box.width > 0 && getComputedStyle(label).visibility !== 'hidden'};
    }
    const img = o.querySelector('img');
    if (img) return {kind: 'image', wide: img.naturalWidth > 2 * img.naturalHeight, src: img.src.length + ':' + img.src.slice(-40),
                     shown: img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().height > 0};
    const table = o.querySelector('table');
    if (table) return {kind: 'table', text: table.innerText.replace(/\\s+/g, ' ').trim()};
    return {kind: 'other', text: o.innerText.slice(0, 200)};
  });
}"""


@pytest.fixture(params=["jupyterlab", "notebook7"])
def front_end(request: pytest.FixtureRequest) -> tuple[str, Lab, str]:
    """(name, server, url of a notebook path with {name} in it)."""
    require("matplotlib", "pip install -e '.[test]'")
    if request.param == "jupyterlab":
        server: Lab = request.getfixturevalue("lab")
        return request.param, server, f"{server.url}/lab/tree/{{name}}?token={server.token}"
    server = request.getfixturevalue("notebook7")
    return request.param, server, f"{server.url}/notebooks/{{name}}?token={server.token}"


def _write_notebook(root: Path, name: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("%load_ext mwnotebook"), nbformat.v4.new_code_cell(RICH_CELL)]
    nbformat.write(nb, root / name)
    return name


def _kernel_idle(server: Lab) -> bool:
    sessions = server.api("/api/sessions")
    return bool(sessions) and all(s["kernel"]["execution_state"] == "idle" for s in sessions)  # type: ignore[union-attr]


def _wait_done(page, index: int, timeout_s: float) -> None:
    page.wait_for_function(
        f"() => {{ const p = document.querySelectorAll('.jp-Cell .jp-InputPrompt')[{index}].textContent;"
        " return /[0-9]/.test(p) && !p.includes('*'); }", timeout=timeout_s * 1000)


def _saved_outputs(path: Path, wanted: int, timeout_s: float = 20.0) -> list[dict]:
    """The rich cell's outputs in the saved file once it holds ``wanted`` label displays."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            nb = nbformat.read(path, as_version=4)
        except nbformat.reader.NotJSONError:  # an autosave between its truncate and its write
            time.sleep(0.2)
            continue
        outputs = nb.cells[1].outputs
        labels = [o for o in outputs if "text/markdown" in o.get("data", {}) and
                  str(o["data"].get("text/html", "")).find("mw-rich-label") >= 0]
        if len(labels) >= wanted or time.monotonic() > deadline:
            nbformat.validate(nb)
            return outputs
        time.sleep(0.5)


def _pairs(items: list[dict]) -> list[tuple[str, dict]]:
    """(label text, output) for every picture and table: the label is the item right before it."""
    pairs = []
    for i, item in enumerate(items):
        if item["kind"] in ("image", "table"):
            before = items[i - 1] if i else {}
            pairs.append((before.get("text", "") if before.get("kind") == "label" else "", item))
    return pairs


_EXPORTED = re.compile(r"mw-rich-label[^>]*>([^<]*)<|(<img[^>]*src=\"data:image/png)|(class=\"dataframe\")")


def _exported_pairs(path: Path) -> list[tuple[str, str]]:
    """(label, "image" | "table") for every picture and pandas table of nbconvert's HTML export of
    the saved file, the label being the nearest label display before it with nothing in between."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_filename(str(path))
    pairs, label = [], ""
    for match in _EXPORTED.finditer(body):
        if match.group(1) is not None:
            label = html.unescape(match.group(1)).strip()
            continue
        pairs.append((label, "image" if match.group(2) else "table"))
        label = ""
    return pairs


def test_each_workers_figures_and_tables_are_labelled_and_shared_ones_show_once(front_end, artifacts_dir):
    from playwright.sync_api import sync_playwright

    kind, server, url = front_end
    name = _write_notebook(server.root, f"rich_labels_{kind}.ipynb")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            page.goto(url.format(name=name))
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            deadline = time.monotonic() + 90  # the kernel starting, on a loaded machine
            while not _kernel_idle(server) and time.monotonic() < deadline:
                time.sleep(0.3)
            run_cell(page, 0)
            _wait_done(page, 0, 90)
            run_cell(page, 1, retry_s=60.0)
            _wait_done(page, 1, 300)  # hang bound: two workers start and import matplotlib
            page.wait_for_timeout(1000)  # images decode
            items = page.evaluate(READ_OUTPUTS)
            area = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea")
            try:
                area.scroll_into_view_if_needed(timeout=5000)
                area.screenshot(path=str(artifacts_dir / f"browser_rich_labels_{kind}.png"), timeout=10_000)
            except Exception:  # a screenshot is an artifact, never the verdict
                page.screenshot(path=str(artifacts_dir / f"browser_rich_labels_{kind}.png"))
            save(page, server.root / name)
            labels = [i for i in items if i["kind"] == "label"]
            outputs = _saved_outputs(server.root / name, len(labels))  # the browser stays open until saved
            (artifacts_dir / f"browser_rich_labels_{kind}.json").write_text(json.dumps(items, indent=1))
            shown_prompts = prompts(page)
        finally:
            browser.close()

    assert labels and all(i["shown"] for i in labels), items
    pairs = _pairs(items)
    images = [(label, i) for label, i in pairs if i["kind"] == "image"]
    tables = [(label, i["text"]) for label, i in pairs if i["kind"] == "table"]
    assert all(i["shown"] for _, i in images), images
    # each worker's own (square) figure once, after its own label; the two differ
    own = sorted((label, i["src"]) for label, i in images if not i["wide"])
    assert [label for label, _ in own] == ["[worker 0]", "[worker 1]"], (items, shown_prompts)
    assert own[0][1] != own[1][1]
    # the (wide) figure that is the same on both workers once, labelled for both
    assert [label for label, i in images if i["wide"]] == ["[all 2 workers]"], items
    assert len(images) == 3, items
    # the shared table once, labelled for all; each worker's own table after its label
    assert [label for label, text in tables if "same table" in text] == ["[all 2 workers]"], tables
    for w in (0, 1):
        assert [label for label, text in tables if f"table of worker {w}" in text] == [f"[worker {w}]"], tables

    # the saved file: valid nbformat (checked in _saved_outputs), each label right before its output
    saved: list[tuple[str, str]] = []
    for i, out in enumerate(outputs):
        data = out.get("data", {})
        if "image/png" in data or "class=\"dataframe\"" in str(data.get("text/html", "")):  # not the status table
            before = outputs[i - 1].get("data", {}) if i else {}
            what = "image" if "image/png" in data else "table"
            saved.append((str(before.get("text/plain", "")) if "text/markdown" in before else "", what))
    assert sorted(saved) == sorted([("[worker 0]", "image"), ("[worker 1]", "image"), ("[all 2 workers]", "image"),
                                    ("[all 2 workers]", "table"), ("[worker 0]", "table"), ("[worker 1]", "table")]), saved
    assert len({o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {})}) == 3
    # nbconvert's HTML of the saved file (what a static viewer shows) has the same labels before the same outputs
    assert sorted(_exported_pairs(server.root / name)) == sorted(saved), _exported_pairs(server.root / name)
