"""The reference pages (docs/reference/*.md, plain Markdown made by tools/docs_reference.py) match the
code, and every error a user can catch is exported from ``mwnotebook``.

A page is stale when the code it is made from changed (a docstring, a signature, an option, a package
docstring, a test tier): run ``python tools/docs_reference.py`` and commit the pages.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import mwnotebook

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    path = ROOT / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


reference = _load("docs_reference")
layout = _load("docs_layout")


def test_committed_reference_pages_match_the_code() -> None:
    assert reference.stale_pages() == [], "run python tools/docs_reference.py and commit docs/reference/"


def test_the_staleness_check_sees_a_changed_page(tmp_path: Path, monkeypatch: object) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    for name, text in reference.pages().items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(reference, "REFERENCE", tmp_path)
    assert reference.stale_pages() == []
    (tmp_path / "api.md").write_text((tmp_path / "api.md").read_text().replace("AsyncCluster", "Async"))
    (tmp_path / "cli.md").unlink()
    assert reference.stale_pages() == ["api.md", "cli.md"]


def test_contributing_s_tier_table_is_made_from_the_tiers_docstrings() -> None:
    """CONTRIBUTING.md's tier table and test bed list are the tiers' and testbed/'s docstrings."""
    assert not layout.contributing_is_stale(), "run python tools/docs_reference.py and commit CONTRIBUTING.md"


def test_the_tier_table_is_remade_from_the_docstrings_and_a_tier_without_one_stops_it(
        tmp_path: Path, monkeypatch: object) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    text = layout.CONTRIBUTING.read_text()
    edited = text.replace("| `tests/unit` | (none) |", "| `tests/unit` | `unit` |")
    assert edited != text and layout.contributing(edited) == text
    (tmp_path / "tests" / "new").mkdir(parents=True)
    (tmp_path / "tests" / "new" / "__init__.py").write_text('"""What it covers.\n\nNeeds: nothing.\n"""\n')
    monkeypatch.setattr(layout, "ROOT", tmp_path)
    with pytest.raises(KeyError, match=r"tests/new/__init__.py a docstring.*Marker"):
        layout.tier_table()


def test_package_docstrings_name_only_files_that_exist() -> None:
    """The layout page is the packages' docstrings: a module they name must be there."""
    assert layout.missing_named_files() == []


def test_docstrings_become_markdown() -> None:
    doc = """First line with ``code`` and :class:`~mwnotebook.engine.cluster.Cluster`.

    1. Usage::

           x = 1
           y = 2

       after the block, :func:`run <mwnotebook.Cluster.run>`.
    """
    assert reference.markdown_of(doc).splitlines() == [
        "First line with `code` and `Cluster`.", "", "1. Usage:", "", "   ```python", "   x = 1", "   y = 2",
        "   ```", "", "   after the block, `run`."]


def _error_classes() -> dict[str, tuple[str, list[str]]]:
    """Every class of the package: name -> (module path, base names), from the source."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in (ROOT / "mwnotebook").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases]
                found[node.name] = (str(path.relative_to(ROOT)), bases)
    return found


#: Errors raised inside a worker kernel: the notebook meets them as a WorkerError naming them.
WORKER_SIDE = ("mwnotebook/worker/", "mwnotebook/processes/")


def notebook_errors() -> list[str]:
    """The MWNotebookError subclasses raised in the notebook's process (worker-side ones excluded)."""
    classes = _error_classes()
    ours = {"MWNotebookError"}
    changed = True
    while changed:
        changed = False
        for name, (_, bases) in classes.items():
            if name not in ours and any(b in ours for b in bases):
                ours.add(name)
                changed = True
    return sorted(n for n in ours if not classes[n][0].startswith(WORKER_SIDE))


def test_every_error_of_the_notebook_side_is_exported() -> None:
    """A user can catch each by ``from mwnotebook import ...``, and the API page documents it."""
    errors = notebook_errors()
    assert "ParameterServerLost" in errors and "RestartFailedError" in errors  # the scan sees subpackages
    assert [e for e in errors if e not in mwnotebook.__all__] == []
    for name in errors:
        assert getattr(mwnotebook, name).__name__ == name
    api = (ROOT / "docs" / "reference" / "api.md").read_text()
    assert [e for e in errors if f"### `{e}`" not in api] == []


#: Raised and caught inside a worker (a custom loop's dropped record), never seen by the user.
INTERNAL = {"DroppedValue"}


def test_every_worker_side_error_is_exported_or_named_in_the_failures_page() -> None:
    import mwnotebook.worker

    classes = _error_classes()
    errors = {name for name, (path, bases) in classes.items() if path.startswith(WORKER_SIDE)
              and any(b.endswith(("Error", "Exception")) for b in bases)} - INTERNAL
    assert {"StrategyError", "WrongStrategyForCluster"} <= errors  # the scan sees both folders
    page = (ROOT / "docs" / "guide" / "failures-and-restarts.md").read_text()
    assert [e for e in sorted(errors) if f"`{e}`" not in page] == []
    exported = set(mwnotebook.worker.__all__)
    assert [e for e in sorted(errors) if classes[e][0].startswith("mwnotebook/worker/") and e not in exported] == []


#: Packages whose docstring names every one of their modules (the layout page shows it): a module
#: added to one of them without a word in the docstring fails. Add a package here once it does.
NAMES_EVERY_MODULE = ("export", "frontend", "frontend/chart", "frontend/cli", "frontend/notebook", "frontend/text",
                      "launchers", "launchers/local", "launchers/ray", "launchers/remote", "launchers/slurm",
                      "launchers/ssh", "processes", "shared")


def test_these_package_docstrings_name_every_module() -> None:
    unnamed = {}
    for package in NAMES_EVERY_MODULE:
        folder = ROOT / "mwnotebook" / package
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        named = set(re.findall(r"``([\w/.]+?)(?:\.py)?``", doc))
        modules = [p.stem for p in folder.glob("*.py") if p.name != "__init__.py"]
        modules += [f"{p.name}/" for p in folder.iterdir() if (p / "__init__.py").exists()]
        missing = [m for m in modules if m not in named and m.rstrip("/") not in named]
        if missing:
            unnamed[package] = missing
    assert unnamed == {}, "name these modules in their package's docstring (docs/reference/layout.md shows it)"
