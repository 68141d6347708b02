"""The "Done when" numbers of the third redesign step for a checkout or a git revision.

    python3 tools/redesign_metrics.py [PATH_OR_REVISION] [--json]

PATH_OR_REVISION is a checkout's directory (default: this one) or a git revision of this
repository (``b749620``, ``HEAD~3``), which is exported to a temporary directory with
``git archive`` and measured there. Every number is read from the files alone (``ast`` and line
counts, nothing imported from the measured checkout):

* the longest chain of engine classes inheriting engine classes (``AsyncCluster(CellRunner(...))``
  counts each class of the chain; a class with no engine base is a chain of 1);
* modules directly in ``mwnotebook/engine/`` (``.py`` files, ``__init__.py`` included);
* call sites of ``layout_of(`` in the package (its definition not counted);
* module globals holding facts handed in: a module-level dict (a ``{...}`` / ``dict(...)`` value or
  a ``dict[...]`` annotation) that a function of the same module fills from one of its own arguments
  (rebound through a ``global`` statement, ``.update(arg)``, ``x[k] = arg``), such as the worker
  names ``name_workers`` kept in ``frontend/text/grouping.py``; caches a module fills with what it
  computes itself are not counted;
* upward imports: the import graph and layer order of *this* checkout's
  tests/unit/test_import_graph.py (``import_graph``, ``layer_of``) applied to the measured package,
  so that before and after are judged by the same layers; the public re-export module
  ``mwnotebook/dashboard.py`` counts as above ``frontend/`` (the redesign's rule), so a front end importing it
  points upward;
* top-level scripts in ``benchmarks/`` (``.py`` files directly in it, ``__init__.py`` not counted),
  the length of ``benchmarks/README.md``, and ``sys.path`` edits anywhere under ``benchmarks/``
  (``sys.path.insert/append/extend`` calls and assignments to ``sys.path`` or a slice of it);
* tests reaching into the cluster's private core: ``._core`` in ``tests/`` (also inside the code
  strings tests send to a kernel);
* package lines: physical lines of ``mwnotebook/**/*.py``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parents[1]
FILLERS = {"update", "setdefault", "__setitem__"}


def _python_files(root: Path) -> Iterator[Path]:
    yield from sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def inheritance_chain(engine: Path) -> list[str]:
    """The longest chain of engine classes, each inheriting the next (most derived first)."""
    bases: dict[str, list[str]] = {}
    for path in _python_files(engine):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, []).extend(b for b in map(_base_name, node.bases) if b)
    memo: dict[str, list[str]] = {}

    def chain(name: str, seen: frozenset[str]) -> list[str]:
        if name not in memo:
            below = [chain(b, seen | {name}) for b in bases[name] if b in bases and b not in seen]
            memo[name] = [name, *max(below, key=len, default=[])]
        return memo[name]

    return max((chain(name, frozenset()) for name in bases), key=len, default=[])


def layout_of_calls(package: Path) -> list[str]:
    sites = []
    for path in _python_files(package):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Call) and _base_name(node.func) == "layout_of":
                sites.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return sites


def _is_dict(node: ast.AST) -> bool:
    if isinstance(node, ast.Dict):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in ("dict", "defaultdict", "OrderedDict")
    if isinstance(node, ast.Subscript):
        return _base_name(node.value) in ("dict", "Dict", "defaultdict", "MutableMapping")
    return isinstance(node, ast.Name) and node.id == "dict"


def _names_one_of(value: ast.expr | None, names: set[str]) -> bool:
    return isinstance(value, ast.Name) and value.id in names


def module_dict_facts(package: Path) -> list[str]:
    """Module-level dicts that a function fills from its own argument: a fact handed to a module
    global instead of down to its users (``name_workers(names)`` -> ``_names.update(names)``)."""
    found = []
    for path in _python_files(package):
        tree = _parse(path)
        dicts: set[str] = set()
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and _is_dict(stmt.value):
                dicts.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and (
                    _is_dict(stmt.annotation) or (stmt.value is not None and _is_dict(stmt.value))):
                dicts.add(stmt.target.id)
        filled: set[str] = set()
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
            declared = {n for node in ast.walk(func) if isinstance(node, ast.Global) for n in node.names}

            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and _names_one_of(node.value, params):
                    for target in node.targets:
                        if isinstance(target, ast.Name) and target.id in declared:
                            filled.add(target.id)
                        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                            filled.add(target.value.id)
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr in FILLERS and isinstance(node.func.value, ast.Name)
                      and any(_names_one_of(a, params) for a in node.args)):
                    filled.add(node.func.value.id)
        found += [f"{path.relative_to(package.parent)}:{name}" for name in sorted(dicts & filled)]
    return found


def _import_graph_test() -> ModuleType:
    """This checkout's tests/unit/test_import_graph.py, loaded from its file (its layers judge both sides)."""
    path = HERE / "tests" / "unit" / "test_import_graph.py"
    spec = importlib.util.spec_from_file_location("_redesign_import_graph", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: Public re-export modules at the package's top that the redesign places above ``frontend/``: the
#: front ends must not import them (they import what these re-export).
PUBLIC_REEXPORTS = ("mwnotebook.dashboard",)


def upward_imports(package: Path) -> list[str]:
    """Edges from a lower layer to a higher one, by this checkout's layer order, with the public
    re-export modules judged half a layer above ``frontend/`` when that order puts them level with it."""
    test = _import_graph_test()

    def layer(module: str) -> float | None:
        found: int | None = test.layer_of(module)
        if found is not None and any(module == m or module.startswith(m + ".") for m in PUBLIC_REEXPORTS):
            frontend: int | None = test.layer_of("mwnotebook.frontend")
            if frontend is not None and found <= frontend:
                return frontend + 0.5
        return found

    out = []
    for module, targets in sorted(test.import_graph(package).items()):
        for target in sorted(targets):
            a, b = layer(module), layer(target)
            if a is not None and b is not None and b > a:
                out.append(f"{module} -> {target}")
    return out


def sys_path_edits(benchmarks: Path) -> list[str]:
    edits = []
    for path in _python_files(benchmarks):
        for node in ast.walk(_parse(path)):
            hit = False
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                hit = node.func.attr in ("insert", "append", "extend") and ast.unparse(node.func.value) == "sys.path"
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                hit = any(ast.unparse(t.value if isinstance(t, ast.Subscript) else t) == "sys.path" for t in targets)
            if hit:
                edits.append(f"{path.relative_to(benchmarks.parent)}:{getattr(node, 'lineno', 0)}")
    return edits


def private_core_reaches(tests: Path) -> list[str]:
    """``._core`` in the tests' text: attribute reads, and code in strings that a kernel runs."""
    sites = []
    for path in _python_files(tests):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            sites += [f"{path.relative_to(tests.parent)}:{number}"] * len(re.findall(r"\._core\b", line))
    return sites


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def metrics(root: Path) -> dict[str, Any]:
    package, engine, benchmarks = root / "mwnotebook", root / "mwnotebook" / "engine", root / "benchmarks"
    chain = inheritance_chain(engine)
    layout = layout_of_calls(package)
    facts = module_dict_facts(package)
    upward = upward_imports(package)
    scripts = sorted(p.name for p in benchmarks.glob("*.py") if p.name != "__init__.py")
    edits = sys_path_edits(benchmarks) if benchmarks.exists() else []
    core = private_core_reaches(root / "tests")
    return {
        "engine class chain": {"value": len(chain), "detail": " <- ".join(chain)},
        "modules directly in mwnotebook/engine/": {"value": len(list(engine.glob("*.py")))},
        "layout_of( call sites": {"value": len(layout), "detail": layout},
        "module dicts filled from an argument": {"value": len(facts), "detail": facts},
        "upward imports": {"value": len(upward), "detail": upward},
        "top-level scripts in benchmarks/": {"value": len(scripts), "detail": scripts},
        "benchmarks/README.md lines": {"value": _lines(benchmarks / "README.md")},
        "sys.path edits in benchmarks/": {"value": len(edits), "detail": edits},
        "tests reaching ._core": {"value": len(core), "detail": core},
        "package lines": {"value": sum(_lines(p) for p in _python_files(package))},
    }


def _export(revision: str, into: Path) -> str:
    """Extract ``revision`` of this repository into ``into``; its short sha."""
    sha = subprocess.run(["git", "rev-parse", "--short", revision], cwd=HERE, capture_output=True, text=True,
                         check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", sha, "mwnotebook", "benchmarks", "tests"], cwd=HERE,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return sha


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default=str(HERE), help="a checkout's directory or a git revision")
    parser.add_argument("--json", action="store_true", help="print every figure and its sites as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redesign-metrics-") as tmp:
        if Path(args.target).is_dir():
            root, label = Path(args.target).resolve(), str(Path(args.target).resolve())
        else:
            root = Path(tmp)
            label = f"revision {_export(args.target, root)}"
        result = metrics(root)
    if args.json:
        print(json.dumps({"measured": label, **result}, indent=1))
        return 0
    print(f"measured: {label}")
    for name, figure in result.items():
        detail = figure.get("detail")
        shown = f"  ({detail})" if isinstance(detail, str) and detail else ""
        if isinstance(detail, list) and detail and len(detail) <= 4:
            shown = f"  ({'; '.join(detail)})"
        print(f"{name:42s} {figure['value']:>6}{shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
