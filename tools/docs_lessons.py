"""Prepare the lesson pages of the docs build from the committed executed copies (notebooks/executed/).

The lesson index is docs/lessons/index.md, which includes the learning path notebooks/README.md (the
same page GitHub shows). Its links and thumbnails point at ``executed/NAME.ipynb`` and
``executed/thumbs/NAME.png``, next to README.md in notebooks/; this writes the same layout next to
docs/lessons/index.md (``docs/lessons/executed/``, ignored by git), so the links resolve in both places.

Each page is the lesson as it is now (its markdown) with the outputs of its executed copy, once the
copy's code cells are the lesson's (else the copy is shown as it is, with a warning: its test,
tests/docs/test_executed_lessons.py, fails until ``python tools/refresh_lessons.py`` runs again). The
exercises' solutions (notebooks/solutions/), which the lessons link to, are copied beside the pages
(``docs/lessons/solutions/``), and the lessons' relative links made right from there.
Every copy is checked: a failed cell not tagged ``raises-exception``, no ``TF_CONFIG`` table, a live
widget in place of the chart's picture, or a lesson that reports metrics without a chart picture
ends the build with the lesson's name and what to do. Nothing is executed here: the build needs no
root, no test hosts and no artifacts/.

Usage: python tools/docs_lessons.py   (``--no-execute`` is accepted and changes nothing)
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import sys
import textwrap
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lesson_catalog import EXECUTED, NOTEBOOKS, ROOT, THUMBS, lesson_names

OUT = ROOT / "docs" / "lessons" / "executed"
#: what the docs build wrote before the learning path (docs/lessons/_run/): removed when found
OLD_OUT = ROOT / "docs" / "lessons" / "_run"
#: a chart's saved picture: the committed copies hold PNG (tools/refresh_lessons.py), the live chart's
#: end state in a freshly executed notebook holds SVG
CHARTS = ("image/png", "image/svg+xml")
REFRESH = "python tools/refresh_lessons.py"
#: a markdown link or image to a path relative to the lesson (no scheme, no anchor, not absolute)
RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)")
#: what the lessons link to, shown beside them (docs/lessons/solutions/, from notebooks/solutions/)
SOLUTIONS = NOTEBOOKS / "solutions"
log = logging.getLogger("docs_lessons")


class LessonError(Exception):
    """A lesson cannot be shown as it must be: the message says which and what to do."""


def code_sources(nb: nbformat.NotebookNode) -> list[str]:
    return [cell.source for cell in nb.cells if cell.cell_type == "code"]


def reports_metrics(nb: nbformat.NotebookNode) -> bool:
    """Whether the lesson's code feeds the live chart (``mw.report`` or a Keras ``fit``)."""
    code = "\n".join(code_sources(nb))
    return "mw.report(" in code or ".fit(" in code


def check(name: str, nb: nbformat.NotebookNode) -> str | None:
    """The MIME type of the last chart picture of an executed lesson (None for a lesson without one).

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
                                  f"(in the executed copy; `{REFRESH} --only {name[:2]}` runs it again)")
            charts += [mime for mime in CHARTS if mime in data][:1]
            if "TF_CONFIG" in str(data.get("text/plain", "")):
                tables += 1
            if "application/vnd.jupyter.widget-view+json" in data:
                raise LessonError(f"{name}: cell {index} still holds a live widget, not the chart's saved picture")
    if not tables:
        raise LessonError(f"{name}: no TF_CONFIG table in the executed copy (did its %%mwtrain cells run?)")
    if reports_metrics(nb) and not charts:
        raise LessonError(f"{name}: the lesson reports metrics but no output holds the chart's saved picture "
                          f"({' or '.join(CHARTS)}): the live chart's end state is missing")
    return charts[-1] if charts else None


def with_outputs(lesson: nbformat.NotebookNode, executed: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The lesson's cells with the outputs (and execution counts) of ``executed``, code cell by code cell.

    ValueError when the code cells differ: the executed copy is of another version of the lesson.
    """
    if code_sources(lesson) != code_sources(executed):
        raise ValueError("its code cells differ from the executed copy's")
    merged = nbformat.from_dict(lesson)
    # the kernel's language as it ran: its highlighting (pygments_lexer ipython3 reads magics and $NAME)
    if "language_info" in executed.metadata:
        merged.metadata["language_info"] = nbformat.from_dict(executed.metadata["language_info"])
    ran = iter([cell for cell in executed.cells if cell.cell_type == "code"])
    for cell in merged.cells:
        if cell.cell_type == "code":
            source = next(ran)
            cell.outputs = source.get("outputs", [])
            cell.execution_count = source.get("execution_count")
    return merged


def one_folder_down(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with the relative links of its markdown made right one folder below the lesson (a lesson's
    ``solutions/NN_solution.ipynb`` is ``../solutions/NN_solution.ipynb`` from notebooks/executed/ and
    from docs/lessons/executed/)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = RELATIVE_LINK.sub(r"](../\1)", cell.source)
    return nb


def page(name: str) -> nbformat.NotebookNode:
    """The docs page of lesson ``name``: LessonError if it has no committed copy or the copy fails a check."""
    copy = EXECUTED / f"{name}.ipynb"
    if not copy.exists():
        raise LessonError(f"{name}: no executed copy at {copy.relative_to(ROOT)}; `{REFRESH} --only {name[:2]}` "
                          "makes it (lessons needing the suite's SSH, Slurm or Ray hosts: as root)")
    if not (THUMBS / f"{name}.png").exists():
        raise LessonError(f"{name}: no thumbnail at {(THUMBS / f'{name}.png').relative_to(ROOT)}; "
                          f"`{REFRESH} --no-run` makes it from the executed copy")
    executed = nbformat.read(copy, as_version=4)
    try:
        nb = one_folder_down(with_outputs(nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4), executed))
    except ValueError as exc:
        log.warning("%s: %s: shown as executed; `%s --only %s` makes a new copy", name, exc, REFRESH, name[:2])
        nb = executed
    check(name, nb)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-execute", action="store_true", help="accepted for older callers; nothing is executed")
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="tools/docs_lessons.py: %(message)s")
    shutil.rmtree(OLD_OUT, ignore_errors=True)
    shutil.rmtree(OUT, ignore_errors=True)
    (OUT / "thumbs").mkdir(parents=True)
    shutil.rmtree(OUT.parent / "solutions", ignore_errors=True)
    (OUT.parent / "solutions").mkdir()
    for solution in sorted(SOLUTIONS.glob("*.ipynb")):  # the exercises' solutions, which the lessons link to
        nb = nbformat.read(solution, as_version=4)
        # saved unexecuted: highlighted as the kernel would (IPython's lexer reads magics and !commands)
        nb.metadata.setdefault("language_info", {"name": "python"}).setdefault("pygments_lexer", "ipython3")
        nbformat.write(nb, OUT.parent / "solutions" / solution.name)
    problems = []
    names = lesson_names()
    for name in names:
        try:
            nb = page(name)
        except LessonError as exc:
            problems.append(str(exc))
            continue
        nbformat.write(nb, OUT / f"{name}.ipynb")
        shutil.copyfile(THUMBS / f"{name}.png", OUT / "thumbs" / f"{name}.png")
    if problems:
        for problem in problems:
            log.error("%s", problem)
        return 1
    log.info("%d lessons ready in %s", len(names), OUT.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
