"""The committed executed lessons (notebooks/executed/) and the learning path (notebooks/README.md).

Every lesson has an executed copy whose code cells are the lesson's (else the copy shows outputs of code
the lesson no longer has: `python tools/refresh_lessons.py --only NN` makes a new one), that passes the
docs' checks, whose charts are PNG pictures GitHub shows, with a thumbnail; and the path table is what
tools/refresh_lessons.py writes from tools/lesson_catalog.py and those copies. No kernel is started.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"


def _load(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, str(TOOLS))  # the tools import each other as scripts do
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


catalog = _load("lesson_catalog")
docs_lessons = _load("docs_lessons")
refresh = _load("refresh_lessons")

LESSONS = catalog.lesson_names()
REFRESH = "python tools/refresh_lessons.py --only {}"


def copy_of(name: str) -> nbformat.NotebookNode:
    path = catalog.EXECUTED / f"{name}.ipynb"
    if not path.exists():
        pytest.fail(f"no executed copy of notebooks/{name}.ipynb at {path.relative_to(ROOT)}: "
                    f"{REFRESH.format(name[:2])} makes it")
    return nbformat.read(path, as_version=4)


def test_every_lesson_is_in_the_catalog_and_every_copy_is_of_a_lesson() -> None:
    assert set(LESSONS) <= set(catalog.BY_NAME), "add to tools/lesson_catalog.py: " + ", ".join(
        sorted(set(LESSONS) - set(catalog.BY_NAME)))
    copies = {p.stem for p in catalog.EXECUTED.glob("*.ipynb")}
    assert copies <= set(LESSONS), f"executed copies of no lesson: {sorted(copies - set(LESSONS))}"


@pytest.mark.parametrize("name", LESSONS)
def test_the_copy_has_its_lessons_code_cells(name: str) -> None:
    lesson = nbformat.read(catalog.NOTEBOOKS / f"{name}.ipynb", as_version=4)
    mine, copied = docs_lessons.code_sources(lesson), docs_lessons.code_sources(copy_of(name))
    differ = [i for i in range(max(len(mine), len(copied)))
              if i >= len(mine) or i >= len(copied) or mine[i] != copied[i]]
    assert not differ, (f"notebooks/executed/{name}.ipynb was executed from another version of the lesson "
                        f"(code cells {differ} differ; {len(copied)} cells there, {len(mine)} in the lesson): "
                        f"{REFRESH.format(name[:2])}")


@pytest.mark.parametrize("name", LESSONS)
def test_the_copy_shows_on_github_and_passes_the_docs_checks(name: str) -> None:
    nb = copy_of(name)
    picture = docs_lessons.check(name, nb)
    assert picture in (None, "image/png"), f"{name}: a chart's picture is {picture}, not a PNG"
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            kept = set(output.get("data", {})) & set(refresh.DROPPED)
            assert not ("image/png" in output.get("data", {}) and kept), f"{name}: cell {index} keeps {kept}"
        assert not set(cell.metadata) & {"execution", "ExecuteTime"}, f"{name}: cell {index} keeps its timestamps"
    assert "widgets" not in nb.metadata
    assert (catalog.THUMBS / f"{name}.png").exists(), f"no thumbnail: {REFRESH.format(name[:2])}"


@pytest.mark.parametrize("name", LESSONS)
def test_the_copys_links_lead_somewhere_from_where_it_is(name: str) -> None:
    """A lesson's relative links (its exercise's solution) still work from notebooks/executed/ on GitHub."""
    broken = [target for cell in copy_of(name).cells if cell.cell_type == "markdown"
              for target in re.findall(r"\]\(([^)\s]+)\)", cell.source)
              if not re.match(r"[a-z][a-z0-9+.-]*:|#|/", target)
              and not (catalog.EXECUTED / target.split("#")[0]).exists()]
    assert not broken, f"{name}: links that lead nowhere from notebooks/executed/: {broken}"


def test_the_path_table_is_made_from_the_catalog_and_the_copies() -> None:
    text = refresh.README.read_text()
    table = text.split(refresh.TABLE_START, 1)[1].split(refresh.TABLE_END, 1)[0].strip()
    assert table == refresh.path_table(refresh.tabled()), (
        "notebooks/README.md's path table is not the one tools/lesson_catalog.py and the executed copies give: "
        "python tools/refresh_lessons.py --no-run")


def _executed(svg: str) -> nbformat.NotebookNode:
    """A lesson as nbclient leaves it: timestamps, widget state, the chart's four representations."""
    nb = nbformat.v4.new_notebook(metadata={"widgets": {"state": {}}, "language_info": {
        "name": "python", "pygments_lexer": "ipython3", "version": "3.11.7"}})
    cell = nbformat.v4.new_code_cell("%%mwtrain\nmodel.fit(ds)", execution_count=3)
    cell.metadata["execution"] = {"iopub.status.busy": "2026-12-05T00:20:00Z"}
    cell.outputs = [nbformat.from_dict({"output_type": "display_data", "metadata": {}, "data": {
        "application/vnd.plotly.v1+json": {"data": []}, "text/html": f"<div>{svg}</div><script></script>",
        "image/svg+xml": svg, "text/plain": "worker 0: done"}})]
    nb.cells = [nbformat.v4.new_markdown_cell("# A lesson"), cell]
    return nb


def test_a_copy_keeps_the_lessons_cells_and_outputs_without_what_changes_every_run() -> None:
    executed = _executed("<svg>chart</svg>")
    lesson = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "version": "3.11.7"}})
    lesson.cells = [nbformat.v4.new_markdown_cell("# A lesson, reworded"),
                    nbformat.v4.new_code_cell("%%mwtrain\nmodel.fit(ds)")]
    nb = refresh.committed_copy(lesson, executed)
    assert nb.cells[0].source == "# A lesson, reworded"  # the lesson's text as it is now
    assert nb.cells[1].execution_count == 3 and "execution" not in nb.cells[1].metadata
    assert "widgets" not in nb.metadata and nb.metadata.language_info == {"name": "python", "pygments_lexer": "ipython3"}
    assert refresh.charts(nb) == ["<svg>chart</svg>"]
    refresh.with_png_charts(nb, {"<svg>chart</svg>": b"PNG"})
    assert nb.cells[1].outputs[0].data == {"image/png": "UE5H", "text/plain": "worker 0: done"}
    lesson.cells[1].source = "%%mwtrain\nmodel.fit(ds, epochs=2)"
    with pytest.raises(ValueError, match="code cells differ"):
        refresh.committed_copy(lesson, executed)
