"""The test bed's rules, read from the files with ``ast`` (nothing imported):

* no test imports another test module (``test_*.py``) or a ``conftest``: what tests share is in the
  test bed (``testbed/``: the real parts they start) or in ``tests/_shared`` (fakes, waits, checks);
  a tier's own helpers are in a plain module of the tier (``tests/reliability/scenario.py``);
* ``benchmarks/`` and ``tools/`` import the test bed, never ``tests``; ``testbed/`` imports nothing
  from ``tests`` either;
* ``benchmarks/`` and ``testbed/`` never edit ``sys.path`` (they run as packages, ``python -m``);
* no test reaches the cluster's private core (``._core``), not even in the code it sends a kernel:
  tests use the public seams;
* no engine class inherits another engine class: the engine is composed of collaborators.

Every rule is also run once on a small planted tree, so a checker that finds nothing cannot pass.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python_files(root: Path) -> Iterator[Path]:
    yield from sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once for all the rules."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def module_of(path: Path, root: Path) -> list[str]:
    """``tests/unit/test_x.py`` -> ``["tests", "unit", "test_x"]`` (a package's ``__init__`` dropped)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported_modules(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute dotted name) of every module ``path`` imports, relative imports resolved, and
    for ``from X import y`` also ``X.y`` (``y`` may be a module)."""
    here = module_of(path, root)
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return name.split(".")[0] == "tests" and (last.startswith("test_") or last == "conftest")


def imports_of_test_modules(root: Path) -> list[str]:
    """Files under ``tests/`` that import a test module or a conftest."""
    return [f"{path.relative_to(root)}:{line} imports {name}"
            for path in python_files(root / "tests") for line, name in imported_modules(path, root)
            if _is_test_module(name)]


def imports_of_tests(root: Path, folder: str) -> list[str]:
    """Files under ``folder`` that import ``tests`` or anything in it."""
    if not (root / folder).exists():
        return []
    return [f"{path.relative_to(root)}:{line} imports {name}"
            for path in python_files(root / folder) for line, name in imported_modules(path, root)
            if name == "tests" or name.startswith("tests.")]


def sys_path_edits(root: Path, folder: str) -> list[str]:
    """``sys.path.insert/append/extend`` calls and assignments to ``sys.path`` (or a slice of it)."""
    edits = []
    for path in python_files(root / folder):
        for node in ast.walk(parsed(path)):
            hit = False
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                hit = node.func.attr in ("insert", "append", "extend") and ast.unparse(node.func.value) == "sys.path"
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                hit = any(ast.unparse(t.value if isinstance(t, ast.Subscript) else t) == "sys.path" for t in targets)
            if hit:
                edits.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}")
    return edits


def private_core_reaches(root: Path) -> list[str]:
    """``._core`` anywhere in the tests' text: attribute reads, and code in strings a kernel runs."""
    return [f"{path.relative_to(root)}:{number}"
            for path in python_files(root / "tests") if path.name != Path(__file__).name
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
            if re.search(r"\._core\b", line)]


def engine_subclasses(root: Path) -> list[str]:
    """Engine classes whose base is another class defined in ``mwnotebook/engine``."""
    classes: dict[str, list[str]] = {}
    for path in python_files(root / "mwnotebook" / "engine"):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef):
                bases = [b.value if isinstance(b, ast.Subscript) else b for b in node.bases]
                classes.setdefault(node.name, []).extend(
                    b.id if isinstance(b, ast.Name) else b.attr for b in bases if isinstance(b, (ast.Name, ast.Attribute)))
    return sorted(f"{name}({base})" for name, bases in classes.items() for base in bases
                  if base in classes and base != name)


def test_no_test_imports_a_test_module_or_a_conftest() -> None:
    assert imports_of_test_modules(ROOT) == []


@pytest.mark.parametrize("folder", ["benchmarks", "tools", "testbed"])
def test_benchmarks_tools_and_the_test_bed_never_import_tests(folder: str) -> None:
    assert imports_of_tests(ROOT, folder) == []


@pytest.mark.parametrize("folder", ["benchmarks", "testbed"])
def test_benchmarks_and_the_test_bed_never_edit_sys_path(folder: str) -> None:
    assert sys_path_edits(ROOT, folder) == []


def test_no_test_reaches_the_cluster_s_private_core() -> None:
    assert private_core_reaches(ROOT) == []


def test_no_engine_class_inherits_another_engine_class() -> None:
    assert engine_subclasses(ROOT) == []


def test_each_rule_finds_what_is_planted(tmp_path: Path) -> None:
    """A tree with one breach of every rule: each checker names it (and the allowed imports pass)."""
    files = {
        "tests/__init__.py": "",
        "tests/unit/__init__.py": "",
        "tests/unit/test_a.py": "from .test_b import X\nfrom tests._shared.waits import wait_for\n",
        "tests/unit/test_b.py": "from ..conftest import helper\nimport tests.tf.test_c\nX = obj._core\n",
        "tests/unit/test_c.py": "from . import test_a\nfrom .scenario import Y\nfrom testbed import processes\n",
        "tests/conftest.py": "from ._plugins.no_skips import hook\n",
        "benchmarks/run.py": "import sys\nsys.path[:0] = ['.']\nfrom tests.tf import cells\nfrom testbed import ps_cells\n",
        "tools/tool.py": "import tests\n",
        "testbed/bed.py": "import sys\nsys.path.insert(0, '.')\nfrom tests._shared import fakes\n",
        "mwnotebook/engine/core.py": "class Base:\n    pass\n\n\nclass Cluster(Base):\n    pass\n",
        "mwnotebook/engine/other.py": "import core\n\n\nclass Runner(core.Base):\n    pass\n\n\nclass Plain(object):\n    pass\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert imports_of_test_modules(tmp_path) == [
        "tests/unit/test_a.py:1 imports tests.unit.test_b",
        "tests/unit/test_b.py:1 imports tests.conftest",
        "tests/unit/test_b.py:2 imports tests.tf.test_c",
        "tests/unit/test_c.py:1 imports tests.unit.test_a",
    ]
    assert imports_of_tests(tmp_path, "benchmarks") == ["benchmarks/run.py:3 imports tests.tf",
                                                        "benchmarks/run.py:3 imports tests.tf.cells"]
    assert imports_of_tests(tmp_path, "tools") == ["tools/tool.py:1 imports tests"]
    assert imports_of_tests(tmp_path, "testbed") == ["testbed/bed.py:3 imports tests._shared",
                                                     "testbed/bed.py:3 imports tests._shared.fakes"]
    assert sys_path_edits(tmp_path, "benchmarks") == ["benchmarks/run.py:2"]
    assert sys_path_edits(tmp_path, "testbed") == ["testbed/bed.py:2"]
    assert private_core_reaches(tmp_path) == ["tests/unit/test_b.py:3"]
    assert engine_subclasses(tmp_path) == ["Cluster(Base)", "Runner(Base)"]
