"""The docs build's own checks, without building: the lesson pages' verdict on an executed lesson
(tools/docs_lessons.py; the committed copies themselves: test_executed_lessons.py) and the options tables made from the magics' and the command's parsers
(docs/_ext/mw_options.py). The build itself runs in tools/test.sh after the suite (bash tools/docs.sh)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, str(ROOT / "tools"))  # the tools import each other as scripts do
lessons = sys.modules.get("docs_lessons") or _load(ROOT / "tools" / "docs_lessons.py", "docs_lessons")
options = _load(ROOT / "docs" / "_ext" / "mw_options.py", "mw_options")

TABLE = {"output_type": "display_data", "metadata": {},
         "data": {"text/plain": "worker  TF_CONFIG ...", "text/html": "<table>TF_CONFIG</table>"}}
CHART = {"output_type": "display_data", "metadata": {},
         "data": {"image/svg+xml": "<svg>chart</svg>", "text/plain": "chart"}}
ERROR = {"output_type": "error", "ename": "WorkerDiedError", "evalue": "worker 1 died", "traceback": []}


def lesson(code: str, outputs: list[dict], tags: list[str] | None = None) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(code)
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    if tags:
        cell.metadata["tags"] = tags
    nb.cells = [nbformat.v4.new_markdown_cell("# A lesson\n\nWhat it shows."), cell]
    return nb


def test_a_lesson_with_its_table_and_chart_passes_and_gives_its_chart() -> None:
    nb = lesson("%%mwtrain\nmodel.fit(ds)", [TABLE, CHART])
    assert lessons.check("l", nb) == "image/svg+xml"
    png = {**CHART, "data": {"image/png": "UE5H", "text/plain": "chart"}}
    assert lessons.check("l", lesson("%%mwtrain\nmodel.fit(ds)", [TABLE, png])) == "image/png"


def test_a_lesson_that_reports_metrics_without_a_chart_picture_fails() -> None:
    with pytest.raises(lessons.LessonError, match="no output holds the chart's saved picture"):
        lessons.check("l", lesson("%%mwtrain\nmw.report(step=1, loss=0.5)", [TABLE]))


def test_a_lesson_without_metrics_needs_no_chart_but_its_table() -> None:
    assert lessons.check("l", lesson("%%mwtrain\nprint('hi')", [TABLE])) is None
    with pytest.raises(lessons.LessonError, match="no TF_CONFIG table"):
        lessons.check("l", lesson("%%mwtrain\nprint('hi')", []))


def test_a_failed_cell_fails_unless_it_is_tagged_raises_exception() -> None:
    with pytest.raises(lessons.LessonError, match="WorkerDiedError"):
        lessons.check("l", lesson("%%mwtrain\nprint('hi')", [TABLE, ERROR]))
    assert lessons.check("l", lesson("%%mwtrain\nprint('hi')", [TABLE, ERROR], tags=["raises-exception"])) is None


def test_a_live_widget_left_in_place_of_the_picture_fails() -> None:
    widget = {"output_type": "display_data", "metadata": {},
              "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "x"}, "text/plain": "w"}}
    with pytest.raises(lessons.LessonError, match="live widget"):
        lessons.check("l", lesson("%%mwtrain\nmodel.fit(ds)", [TABLE, CHART, widget]))


def test_the_mwtrain_table_lists_every_option_of_the_parser() -> None:
    from mwnotebook.frontend.notebook.magics import mwtrain_parser

    rows = options.option_rows(options.load_parser("mwnotebook.frontend.notebook.magics:mwtrain_parser"))
    shown = {name.strip() for row in rows for name in row[0].split(",")}
    expected = {s for action in mwtrain_parser()._actions for s in action.option_strings}  # noqa: SLF001
    assert expected and expected == shown
    restarts = next(r for r in rows if r[0] == "--max-restarts")
    assert restarts[1] == "K" and "MWNOTEBOOK_MAX_RESTARTS" in restarts[2]


def test_the_command_tables_have_its_subcommands() -> None:
    top = options.option_rows(options.load_parser("mwnotebook.frontend.cli.command:build_parser"))
    assert {"run", "export"} <= {row[0] for row in top}
    run = options.option_rows(options.load_parser("mwnotebook.frontend.cli.command:build_parser", "run"))
    assert any(row[0] == "--report" for row in run)
