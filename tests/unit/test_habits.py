"""The repository's habits that a file can check: one version source, a reasoned mypy deny-list,
package docstrings that say what the package owns, comments that point only to files in the
repository, and the strict-share reader (tools/strict_share.py) itself."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"


def _strict_share() -> ModuleType:
    spec = importlib.util.spec_from_file_location("strict_share", REPO / "tools" / "strict_share.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mypy() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["mypy"]


def test_strict_reader_applies_the_deny_list_over_global_strict() -> None:
    is_strict = _strict_share().is_strict
    config = {"strict": True, "overrides": [
        {"module": ["pkg.loose", "pkg.sub.*"], "disallow_untyped_defs": False},
        {"module": "pkg.sub.tight", "disallow_untyped_defs": True},  # exact beats the wildcard
    ]}
    assert is_strict("pkg.typed", config)
    assert not is_strict("pkg.loose", config)
    assert not is_strict("pkg.sub", config) and not is_strict("pkg.sub.other", config)
    assert is_strict("pkg.sub.tight", config)


def test_strict_reader_reads_a_per_module_strict_list() -> None:
    """The older form: lenient globally, the strict flags switched on for listed modules."""
    share = _strict_share()
    on = dict.fromkeys(share.STRICT_FLAGS, True)
    config = {"overrides": [{"module": ["pkg.a"], **on}, {"module": ["pkg.b"], **{**on, "warn_return_any": False}}]}
    assert share.is_strict("pkg.a", config)
    assert not share.is_strict("pkg.b", config)
    assert not share.is_strict("pkg.c", config)


def test_mypy_is_strict_by_default_with_a_short_reasoned_deny_list() -> None:
    mypy = _mypy()
    assert mypy.get("strict") is True
    relaxed = [o for o in mypy.get("overrides", []) if o.get("disallow_untyped_defs") is False]
    modules = [m for o in relaxed for m in o["module"]]
    assert len(modules) <= 8, modules
    comments = "\n".join(line for line in PYPROJECT.read_text().splitlines() if line.lstrip().startswith("#"))
    unexplained = [m for m in modules if m.removeprefix("mwnotebook.") + " " not in comments]
    assert not unexplained, f"each deny-listed module needs a '# name - reason' comment: {unexplained}"


def test_the_version_is_written_once() -> None:
    project = tomllib.loads(PYPROJECT.read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "mwnotebook/__init__.py"
    assert re.search(r'^__version__ = "[0-9][^"]*"$', (REPO / "mwnotebook" / "__init__.py").read_text(), re.M)


def test_every_package_docstring_says_what_it_owns() -> None:
    """More than the package's own name: a sentence a newcomer can place the folder by."""
    vague = {}
    for init in sorted((REPO / "mwnotebook").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if len(doc.split()) < 6:
            vague[str(init.relative_to(REPO))] = doc
    assert not vague, vague


#: Pointers to documents that are not in the repository (built in pieces so this file is no hit).
_OUTSIDE = re.compile("|".join([r"\bissues? \d", r"\bissue-\d", "DESIGN" + r"\.md", "seeds" + "/"]), re.I)


def test_comments_point_only_to_files_in_the_repository() -> None:
    hits = []
    for folder in ("mwnotebook", "tests", "benchmarks", "tools"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in (".py", ".md", ".sh") or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if _OUTSIDE.search(line):
                    hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not hits, "\n".join(hits)
