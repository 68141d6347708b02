"""The import graph of mwnotebook: no cycles, no import pointing upward in the layer order, and a
worker side that imports without jupyter_client.

Edges come from every ``import`` statement in the package (read with ``ast``), including the ones
inside functions and under ``if TYPE_CHECKING:``: a lazy import still couples two modules.

Run as a script to print the counts for any checkout::

    python tests/unit/test_import_graph.py [path/to/mwnotebook]
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "mwnotebook"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

#: Lower layers never import higher ones. A module's layer is the first prefix that matches.
LAYERS: list[tuple[int, tuple[str, ...]]] = [
    (0, ("mwnotebook.errors",)),
    (1, ("mwnotebook.shared", "mwnotebook.config")),
    (2, ("mwnotebook.worker", "mwnotebook.recipes", "mwnotebook.profiling", "mwnotebook.launchers")),
    (3, ("mwnotebook.engine",)),
    (4, ("mwnotebook.dashboard", "mwnotebook.frontend")),
    (5, ("mwnotebook",)),
]


def layer_of(module: str) -> int | None:
    for layer, prefixes in LAYERS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return layer
    return None


def module_names(root: Path) -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _imported(module: str, path: Path, known: set[str]) -> Iterator[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if full in known else base


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the package modules it imports (the nearest existing module of each name)."""
    modules = module_names(root)
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for name in _imported(module, path, known):
            target = name
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module and target.split(".")[0] == PACKAGE:
                graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Edges from a lower layer to a higher one (modules outside every layer are not judged)."""
    out = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = layer_of(module), layer_of(target)
            if a is not None and b is not None and b > a:
                out.append((module, target))
    return out


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in import_graph() if layer_of(m) is None]
    assert not unplaced


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_no_import_points_upward() -> None:
    assert upward_imports(import_graph()) == []


def test_the_graph_sees_known_edges() -> None:
    """Guards the reader itself: a parser that found no edges would pass the two tests above."""
    graph = import_graph()
    assert "mwnotebook.engine.connection" in graph["mwnotebook.engine.async_cluster"]
    assert "mwnotebook.errors" in graph["mwnotebook.config.spec"]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert upward_imports({"mwnotebook.errors": {"mwnotebook.engine.loop"}, "mwnotebook.engine.loop": set()})


def test_worker_side_imports_without_jupyter_client() -> None:
    """``import mwnotebook.worker`` in a process where jupyter_client cannot be imported."""
    code = textwrap.dedent("""
        import sys
        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("jupyter_client", "zmq"):
                    raise ImportError(f"{name} is blocked by the test")
                return None
        sys.meta_path.insert(0, Blocker())
        import mwnotebook.worker as mw
        import mwnotebook.worker._lifetime
        assert callable(mw.report)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("jupyter_client", "zmq", "ipykernel"))
        print("LOADED", loaded)
        engine = sorted(m for m in sys.modules if m.startswith("mwnotebook.engine"))
        print("ENGINE", engine)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ROOT.parent, check=False)
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout
    assert "ENGINE []" in out.stdout


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else ROOT
    graph = import_graph(root)
    edges = sum(len(t) for t in graph.values())
    found = cycles(graph)
    upward = upward_imports(graph)
    print(f"{root}: {len(graph)} modules, {edges} import edges, {len(found)} cycles, "
          f"{len(upward)} upward imports, {sum(layer_of(m) is None for m in graph)} modules outside the layers")
    for component in found:
        print("  cycle:", " <-> ".join(component))
    for a, b in upward:
        print(f"  upward: {a} -> {b}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
