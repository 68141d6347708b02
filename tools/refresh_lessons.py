"""Refresh the committed executed lessons: run each lesson's test, copy its executed notebook in.

    python tools/refresh_lessons.py                 # every lesson (as root: 04, 06, 09b and 10 need
                                                    # the suite's SSH, Slurm and Ray test hosts)
    python tools/refresh_lessons.py --only 08,09    # some lessons
    python tools/refresh_lessons.py --no-run        # no test: the copies already in artifacts/

For each lesson (tools/lesson_catalog.py), its test (one at a time, as the suite runs it) executes the
lesson and saves ``artifacts/NAME.executed.ipynb``; a copy saved by a test that passed becomes
``notebooks/executed/NAME.ipynb``: the lesson's own cells with the executed outputs, nothing volatile
(no execution timestamps, no widget state, no kernel version), and each chart's picture as a PNG
(GitHub shows an ``image/png`` output; it does not run the chart's script and its SVG rendering is
unreliable). Then the thumbnails (``notebooks/executed/thumbs/NAME.png``: the last chart's first panel,
or the lesson's first labelled worker lines) and the learning path's table in notebooks/README.md
(the key results read from the copies). A lesson whose test failed keeps its committed copy and is
reported with its log (artifacts/refresh/); the exit status is then 1.

Needs the test extras (pytest, nbclient, TensorFlow) and Chromium with Playwright (tests/browser's).
"""

from __future__ import annotations

import argparse
import base64
import io
import logging
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_lessons import LessonError, check, one_folder_down, with_outputs
from lesson_catalog import (
    ARTIFACTS,
    BY_NAME,
    EXECUTED,
    NOTEBOOKS,
    ROOT,
    THUMBS,
    Lesson,
    lesson_names,
)

log = logging.getLogger("refresh_lessons")

README = NOTEBOOKS / "README.md"
TABLE_START = ("<!-- path table: written by tools/refresh_lessons.py "
               "(from tools/lesson_catalog.py and the executed copies) -->")
TABLE_END = "<!-- end of the path table -->"
SVG = "image/svg+xml"
PNG = "image/png"
#: the chart's other representations: an interactive figure and an HTML variant whose script fetches
#: plotly.js; neither shows on GitHub, and the PNG stands for them
DROPPED = ("application/vnd.plotly.v1+json", "text/html", SVG)
#: the chart's panels are 720 x 320 (mwnotebook/frontend/chart/svg.py); a thumbnail is the first one
PANEL = (720, 320)
THUMB_WIDTH = 320
#: a drawn curve in the chart's SVG (mwnotebook/frontend/chart/svg.py); a chart without one is empty
LINE = "<polyline"
#: each lesson test's bound (pytest-timeout), seconds
TEST_TIMEOUT_S = 1200


@dataclass
class Refresh:
    """What happened to each lesson: copied, or why not."""

    copied: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def run_test(test: str, logs: Path) -> tuple[bool, str]:
    """Run one lesson test as the suite does; (passed, the tail of its output)."""
    logs.mkdir(parents=True, exist_ok=True)
    log_file = logs / (re.sub(r"[^A-Za-z0-9_.-]+", "_", test)[-120:] + ".log")
    started = time.monotonic()
    with log_file.open("w") as out:
        # a hang bound, not a timing: the slowest lesson test (Ray's, with its test cluster) took 185 s
        # under load 9; pytest-timeout ends the test and its fixtures stop what they started
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:benchmark", "-q", "-rs",
                               f"--timeout={TEST_TIMEOUT_S}", test],
                              cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False,
                              env=dict(os.environ, MWNOTEBOOK_NO_SKIPS="1"))
    tail = "\n".join(log_file.read_text(errors="replace").strip().splitlines()[-12:])
    log.info("%s: %s in %.0f s (log: %s)", test, "passed" if proc.returncode == 0 else f"rc={proc.returncode}",
             time.monotonic() - started, log_file.relative_to(ROOT))
    return proc.returncode == 0, tail


def committed_copy(lesson: nbformat.NotebookNode, executed: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The lesson's cells with ``executed``'s outputs, without what changes on every run but the outputs."""
    nb = one_folder_down(with_outputs(lesson, executed))  # it lives in notebooks/executed/
    nb.metadata.pop("widgets", None)
    nb.metadata.get("language_info", {}).pop("version", None)
    for cell in nb.cells:
        for key in ("execution", "ExecuteTime"):
            cell.metadata.pop(key, None)
    return nb


def charts(nb: nbformat.NotebookNode) -> list[str]:
    """The SVG of every chart picture in ``nb``, in order."""
    return [str(output["data"][SVG]) for cell in nb.cells for output in cell.get("outputs", [])
            if SVG in output.get("data", {})]


def with_png_charts(nb: nbformat.NotebookNode, pngs: dict[str, bytes]) -> None:
    """Each chart output becomes its PNG (from ``pngs``, by SVG) and its text."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if SVG in data:
                png = base64.b64encode(pngs[str(data[SVG])]).decode()
                output["data"] = {PNG: png, **{k: v for k, v in data.items() if k not in DROPPED}}


def text_thumbnail(nb: nbformat.NotebookNode) -> str:
    """A picture of the lesson's first labelled worker lines, wrapped as a terminal shows them (a panel's size)."""
    lines = [line for cell in nb.cells for output in cell.get("outputs", [])
             if output.get("output_type") == "stream" for line in str(output.get("text", "")).splitlines()
             if line.startswith("[")]
    rows = [wrapped for line in lines for wrapped in textwrap.wrap(line, 58, subsequent_indent="  ")][:7]
    text = "".join(f'<text x="14" y="{40 + 42 * i}">{escape(row)}</text>' for i, row in enumerate(rows))
    width, height = PANEL
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}"><rect width="{width}" height="{height}" fill="#1e1e2e"/>'
            f'<g font-family="monospace" font-size="20" fill="#e0e0e0">{text}</g></svg>')


def small_png(png: bytes) -> bytes:
    """``png`` in 64 colours (a chart has a few lines on white: a third of the size, the same to the eye),
    or as it is without Pillow."""
    try:
        from PIL import Image
    except ImportError:
        return png
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(
        out, "PNG", optimize=True)
    return out.getvalue()


def render(svgs: list[str], thumbs: dict[str, str]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """PNGs of ``svgs`` (full size) and of ``thumbs`` (name -> SVG; the first panel, THUMB_WIDTH wide),
    drawn by headless Chromium as a browser shows them."""
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT))
    from testbed.jupyter_lab import CHROMIUM, CHROMIUM_ARGS

    def shot(page: Any, svg: str, clip: tuple[int, int] | None) -> bytes:
        page.set_content(f'<html><body style="margin:0;background:#fff">{svg}</body></html>')
        picture = page.locator("svg").first
        if clip is None:
            return small_png(picture.screenshot())
        box = picture.bounding_box()
        return small_png(page.screenshot(clip={"x": 0, "y": 0, "width": min(box["width"], clip[0]),
                                               "height": min(box["height"], clip[1])}))

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            full = browser.new_page(viewport={"width": 1000, "height": 1200})
            big = {svg: shot(full, svg, None) for svg in dict.fromkeys(svgs)}
            small = browser.new_page(viewport={"width": 1000, "height": 1200},
                                     device_scale_factor=THUMB_WIDTH / PANEL[0])
            little = {name: shot(small, svg, PANEL) for name, svg in thumbs.items()}
        finally:
            browser.close()
    return big, little


def output_text(nb: nbformat.NotebookNode) -> str:
    """Every stream and every ``text/plain`` of ``nb``'s outputs."""
    return "\n".join(str(output.get("text", "")) + str(output.get("data", {}).get("text/plain", ""))
                     for cell in nb.cells for output in cell.get("outputs", []))


def title(nb: nbformat.NotebookNode) -> str:
    heading = next(c for c in nb.cells if c.cell_type == "markdown").source.strip().splitlines()[0]
    return re.sub(r"^#+\s*(\d+\s*·\s*)?", "", heading).strip()


def path_table(names: list[str]) -> str:
    """The learning path's table, from the catalog and the committed copies (LookupError: a key result
    is not in its copy; KeyError: a lesson is not in the catalog)."""
    rows = ["| # | Lesson | Concept | Read first | Runs on | Min | What you should see | Chart |",
            "|---|---|---|---|---|---|---|---|"]
    for name in names:
        lesson: Lesson = BY_NAME[name]
        copy = nbformat.read(EXECUTED / f"{name}.ipynb", as_version=4)
        cells = [lesson.number, f"[{title(copy)}](executed/{name}.ipynb)", lesson.concept,
                 ", ".join(lesson.after) or "—", " + ".join(lesson.needs), str(lesson.minutes),
                 lesson.result.render(name, output_text(copy)), f"![{lesson.number}](executed/thumbs/{name}.png)"]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


def tabled() -> list[str]:
    """The lessons in the path table: those in the catalog with an executed copy."""
    return [name for name in lesson_names() if name in BY_NAME and (EXECUTED / f"{name}.ipynb").exists()]


def write_table(names: list[str]) -> None:
    text = README.read_text()
    if TABLE_START not in text or TABLE_END not in text:
        raise SystemExit(f"{README.relative_to(ROOT)} has lost its table markers ({TABLE_START!r} ... {TABLE_END!r})")
    head, rest = text.split(TABLE_START, 1)
    README.write_text(f"{head}{TABLE_START}\n{path_table(names)}\n{TABLE_END}{rest.split(TABLE_END, 1)[1]}")


def refresh(names: list[str], run: bool) -> Refresh:
    done = Refresh()
    fresh: dict[str, nbformat.NotebookNode] = {}
    tests = {BY_NAME[name].test: [n for n in names if BY_NAME[n].test == BY_NAME[name].test] for name in names}
    for test, of in tests.items():
        started = time.time()
        passed, tail = run_test(test, ARTIFACTS / "refresh") if run else (True, "")
        for name in of:
            saved = ARTIFACTS / f"{name}.executed.ipynb"
            if not passed:
                done.failed[name] = f"its test failed: python3 -m pytest -p no:benchmark {test}\n{tail}"
            elif not saved.exists() or (run and saved.stat().st_mtime < started):
                if run:
                    done.failed[name] = f"{test} passed but saved no {saved.relative_to(ROOT)}\n{tail}"
            else:
                fresh[name] = nbformat.read(saved, as_version=4)
    copies: dict[str, nbformat.NotebookNode] = {}
    for name in names:
        lesson = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        committed = EXECUTED / f"{name}.ipynb"
        source = fresh.get(name) or (nbformat.read(committed, as_version=4) if committed.exists() else None)
        if source is None:
            done.failed.setdefault(name, "no executed copy in artifacts/ and none committed")
            continue
        try:
            nb = committed_copy(lesson, source)
            check(name, nb)
        except (ValueError, LessonError) as exc:
            if name in fresh:
                done.failed[name] = f"the executed copy in artifacts/: {exc}"
            elif name not in done.failed:  # a committed copy of an older lesson: its code changed since
                done.failed[name] = f"the committed copy: {exc}; run its test: {BY_NAME[name].test}"
            continue
        copies[name] = nb
    svgs = [svg for nb in copies.values() for svg in charts(nb)]
    # a thumbnail from each new copy, and for a committed copy that lacks one (its chart, if it still
    # has the SVG; else its worker lines)
    thumbs = {name: ([svg for svg in charts(nb) if LINE in svg] or [text_thumbnail(nb)])[-1]
              for name, nb in copies.items() if name in fresh or not (THUMBS / f"{name}.png").exists()}
    for name, nb in copies.items():
        empty = [i for i, svg in enumerate(charts(nb)) if LINE not in svg]
        if empty:
            log.warning("%s: chart(s) %s of %d have no line (no metric arrived)", name, empty, len(charts(nb)))
    big, little = render(svgs, thumbs) if svgs or thumbs else ({}, {})
    EXECUTED.mkdir(exist_ok=True)
    THUMBS.mkdir(exist_ok=True)
    for name, nb in copies.items():
        with_png_charts(nb, big)
        nbformat.write(nb, EXECUTED / f"{name}.ipynb")
        if name in little:
            (THUMBS / f"{name}.png").write_bytes(little[name])
        if name in fresh:
            done.copied.append(name)
    return done


def selected(only: str | None) -> list[str]:
    names = lesson_names()
    if only:
        wanted = [w.strip() for w in only.split(",") if w.strip()]
        names = [name for name in names if any(name == w or name.split("_", 1)[0] == w.zfill(2) for w in wanted)]
        if len(names) < len(wanted):
            raise SystemExit(f"--only {only}: the lessons are "
                             f"{', '.join(n.split('_', 1)[0] for n in lesson_names())}")
    missing = [name for name in names if name not in BY_NAME]
    if missing:
        raise SystemExit(f"not in tools/lesson_catalog.py: {', '.join(missing)} (add each: its test, needs, "
                         "concept, minutes, key result)")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", metavar="NN,NN", help="these lessons only (numbers or names)")
    parser.add_argument("--no-run", action="store_true",
                        help="run no test: take the executed copies already in artifacts/")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="tools/refresh_lessons.py: %(message)s")
    started = time.monotonic()
    names = selected(args.only)
    done = refresh(names, run=not args.no_run)
    everything = lesson_names()
    have = tabled()
    try:
        write_table(have)
    except LookupError as exc:
        done.failed["the path table"] = str(exc)
    log.info("copied %d lesson(s) in %.0f s: %s", len(done.copied), time.monotonic() - started,
             ", ".join(done.copied) or "none")
    for name, why in done.failed.items():
        log.error("%s: NOT refreshed: %s", name, why)
    stale = [name for name in everything if name not in have]
    if stale:
        log.error("not in the path table (no executed copy, or not in tools/lesson_catalog.py): %s",
                  ", ".join(stale))
    return 1 if done.failed or stale else 0


if __name__ == "__main__":
    sys.exit(main())
