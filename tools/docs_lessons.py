"""Prepare the lesson gallery for the docs build: every notebooks/*.ipynb, with its outputs.

For each lesson it takes the executed copy the test suite saved (``artifacts/NAME.executed.ipynb``;
see LESSON_TESTS) or, when that is missing and the lesson runs on this machine alone, executes the
lesson with nbclient. It then checks the executed copy (no error output, the TF_CONFIG table, the
chart's saved picture in a lesson that reports metrics) and writes into ``docs/lessons/_run/``: the
notebook, its thumbnail (the last chart's SVG, or its first labelled lines) and ``gallery.md`` (the
thumbnail grid and the toctree that docs/lessons/index.md includes).
Any failed check ends the build with the lesson's name and what to do.

Usage: python tools/docs_lessons.py [--no-execute]
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import textwrap
from html import escape
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
ARTIFACTS = ROOT / "artifacts"
OUT = ROOT / "docs" / "lessons" / "_run"

#: lesson -> the test that executes it and saves artifacts/LESSON.executed.ipynb
LESSON_TESTS = {
    "01_seed_two_workers": "tests/tf/test_core_tf.py::test_seed_notebook_prints_the_seeds_exact_lines",
    "02_keras_fit_live_curves": "tests/tf/test_reporting.py::test_lesson_notebook_runs_and_saves_a_static_chart",
    "03_custom_loop_live_curves": "tests/tf/test_reporting.py::test_lesson_notebook_runs_and_saves_a_static_chart",
    "04_remote_hosts": "tests/remote/test_remote_notebook.py",
    "05_performance_recipes": "tests/tf/test_recipes_tf.py::test_notebook_05_runs_and_shows_each_recipe",
    "06_laptop_ssh_slurm": "tests/slurm/test_slurm_frontends.py",
    "07_official_tutorial_flows": "tests/tf/test_tutorial_flows.py",
    "08_preemption_and_recovery": "tests/tf/test_lesson_08.py",
    "09_parameter_server_training": "tests/tf/test_ps_lesson.py",
    "10_ray_cluster": "tests/ray/test_ray_lesson.py",
}
#: lessons that need the suite's SSH test hosts, Slurm cluster or Ray cluster: never executed here
NEEDS_TEST_HOSTS = {"04_remote_hosts", "06_laptop_ssh_slurm", "10_ray_cluster"}

CHART = "image/svg+xml"
log = logging.getLogger("docs_lessons")


class LessonError(Exception):
    """A lesson cannot be shown as it must be: the message says which and what to do."""


def executed_copy(name: str, execute: bool) -> nbformat.NotebookNode:
    path = ARTIFACTS / f"{name}.executed.ipynb"
    source = NOTEBOOKS / f"{name}.ipynb"
    made_by = LESSON_TESTS.get(name, "a test that executes it and saves artifacts/NAME.executed.ipynb")
    if path.exists():
        if path.stat().st_mtime < source.stat().st_mtime:
            log.warning("%s: the executed copy is older than the lesson; rerun %s", name, made_by)
        return nbformat.read(path, as_version=4)
    if name in NEEDS_TEST_HOSTS or not execute:
        raise LessonError(f"{name}: no executed copy at {path.relative_to(ROOT)}. It is made by "
                          f"`python3 -m pytest -p no:benchmark {made_by}`"
                          + (" (it needs the suite's test hosts: SSH, Slurm or Ray; root)."
                             if name in NEEDS_TEST_HOSTS else "."))
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    log.info("%s: executing (no executed copy in artifacts/)", name)
    nb = nbformat.read(source, as_version=4)
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT)}}).execute()
    except CellExecutionError as exc:
        tail = "\n".join(re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()[-3:])
        raise LessonError(f"{name}: the lesson failed when executed (its test: {made_by}):\n{tail}") from None
    ARTIFACTS.mkdir(exist_ok=True)
    nbformat.write(nb, path)
    return nb


def reports_metrics(nb: nbformat.NotebookNode) -> bool:
    """Whether the lesson's code feeds the live chart (``mw.report`` or a Keras ``fit``)."""
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return "mw.report(" in code or ".fit(" in code


def check(name: str, nb: nbformat.NotebookNode) -> str | None:
    """The last chart picture of an executed lesson (None for a lesson that reports no metric).

    LessonError if a cell failed, a live widget was left in place of the saved picture, the TF_CONFIG
    table is missing, or a lesson that reports metrics has no chart picture.
    """
    charts, tables = [], 0
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            # a cell tagged raises-exception shows a failure on purpose (nbclient's convention)
            if output.get("output_type") == "error" and "raises-exception" not in cell.metadata.get("tags", []):
                evalue = textwrap.shorten(str(output.get("evalue")), 300, placeholder=" ...")
                raise LessonError(f"{name}: cell {index} ended with {output.get('ename')}: {evalue} "
                                  f"(in the executed copy; rerun {LESSON_TESTS.get(name, 'its test')})")
            if CHART in data:
                charts.append(data[CHART])
            if "TF_CONFIG" in str(data.get("text/plain", "")):
                tables += 1
            if "application/vnd.jupyter.widget-view+json" in data:
                raise LessonError(f"{name}: cell {index} still holds a live widget, not the chart's saved picture")
    if not tables:
        raise LessonError(f"{name}: no TF_CONFIG table in the executed copy (did its %%mwtrain cells run?)")
    if reports_metrics(nb) and not charts:
        raise LessonError(f"{name}: the lesson reports metrics but no output holds the chart's saved picture "
                          f"({CHART}): the live chart's end state is missing")
    return str(charts[-1]) if charts else None


def text_thumbnail(nb: nbformat.NotebookNode) -> str:
    """A thumbnail for a lesson without a chart: its first labelled worker lines, as a terminal shows them."""
    lines = [line for cell in nb.cells for output in cell.get("outputs", [])
             if output.get("output_type") == "stream" for line in output.get("text", "").splitlines()
             if line.startswith("[")][:6]
    rows = "".join(
        f'<text x="12" y="{30 + 22 * i}">{escape(textwrap.shorten(line, 64, placeholder=" ..."))}</text>'
        for i, line in enumerate(lines))
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="560" height="170" viewBox="0 0 560 170">'
            '<rect width="560" height="170" rx="6" fill="#1e1e2e"/>'
            f'<g font-family="monospace" font-size="13" fill="#e0e0e0">{rows}</g></svg>')


def title_and_blurb(nb: nbformat.NotebookNode) -> tuple[str, str]:
    """The lesson's first heading, and the opening of its first paragraph (whole sentences, ~80+ characters)."""
    first = next(c for c in nb.cells if c.cell_type == "markdown")
    title, _, rest = first.source.strip().partition("\n")
    paragraph = " ".join(rest.strip().split("\n\n", 1)[0].split())
    blurb = ""
    for sentence in re.split(r"(?<=[.!?:])\s+", paragraph):
        blurb = f"{blurb} {sentence}".strip()
        if len(blurb) >= 80 and not blurb.endswith(":"):
            break
    if len(blurb) > 240:
        blurb = textwrap.shorten(blurb, 240, placeholder=" ...")
        if blurb.count("`") % 2:  # never leave a code span open
            blurb = blurb[: blurb.rindex("`")].rstrip() + " ..."
    if blurb.endswith(":"):  # the paragraph leads into a list the card does not show
        blurb = blurb[:-1] + "."
    return re.sub(r"^#+\s*", "", title).strip(), blurb


def gallery(entries: list[tuple[str, str, str]]) -> str:
    """The cards and toctree, with paths relative to docs/lessons/index.md, which includes this."""
    cards = []
    for name, title, blurb in entries:
        cards.append(f":::{{grid-item-card}} {title}\n:link: _run/{name}\n:link-type: doc\n:img-top: _run/{name}.svg\n"
                     f":class-img-top: mw-thumb\n\n{blurb}\n:::\n")
    toctree = "\n".join(f"_run/{name}" for name, _, _ in entries)
    return ("::::{grid} 1 2 2 3\n:gutter: 3\n\n" + "\n".join(cards) + "::::\n\n"
            f"```{{toctree}}\n:hidden:\n\n{toctree}\n```\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-execute", action="store_true", help="never execute a lesson; a missing copy fails")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="tools/docs_lessons.py: %(message)s")
    OUT.mkdir(parents=True, exist_ok=True)
    for stale in OUT.iterdir():
        stale.unlink()
    entries, problems = [], []
    for source in sorted(NOTEBOOKS.glob("*.ipynb")):
        name = source.stem
        try:
            nb = executed_copy(name, execute=not args.no_execute)
            svg = check(name, nb)
        except LessonError as exc:
            problems.append(str(exc))
            continue
        (OUT / f"{name}.svg").write_text(svg if svg is not None else text_thumbnail(nb))
        nbformat.write(nb, OUT / f"{name}.ipynb")
        entries.append((name, *title_and_blurb(nb)))
    if problems:
        for problem in problems:
            log.error("%s", problem)
        return 1
    (OUT / "gallery.md").write_text(gallery(entries))
    log.info("%d lessons ready in %s", len(entries), OUT.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
