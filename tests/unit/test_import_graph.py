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
    (0, ("mwnotebook.errors", "mwnotebook.processes.shipped")),
    (1, ("mwnotebook.shared", "mwnotebook.config")),
    (2, ("mwnotebook.worker", "mwnotebook.recipes", "mwnotebook.profiling", "mwnotebook.processes",
         "mwnotebook.export", "mwnotebook.course")),
    (3, ("mwnotebook.launchers", "mwnotebook.registry")),
    (4, ("mwnotebook.engine", "mwnotebook.experiments")),
    (5, ("mwnotebook.frontend", "mwnotebook.server")),
    # the public re-export of the chart (frontend/chart/): above frontend/, which imports the real modules
    (6, ("mwnotebook.dashboard",)),
    (7, ("mwnotebook",)),
]

#: The code that runs inside the processes the launchers start: it never needs the notebook's side.
PROCESSES = "mwnotebook.processes"
SHIPPED = "mwnotebook.processes.shipped"
NOTEBOOK_SIDE = ("mwnotebook.engine", "mwnotebook.launchers", "mwnotebook.frontend", "mwnotebook.dashboard")


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
    """Each module's own layer prefix is more specific than the package itself (the last layer is only for
    ``mwnotebook/__init__``): a module that only the catch-all matched would escape the order."""
    graph = import_graph()
    unplaced = [m for m in graph if layer_of(m) is None]
    only_catch_all = [m for m in graph if m != PACKAGE and layer_of(m) == LAYERS[-1][0]]
    assert not unplaced and not only_catch_all, (unplaced, only_catch_all)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _module_level(tree: ast.Module) -> Iterator[ast.AST]:
    """The statements that run when the module is imported (not function or class bodies)."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(node))


def _external_imports(path: Path) -> set[str]:
    """Top-level package names a module imports when it is imported."""
    names: set[str] = set()
    for node in _module_level(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_processes_never_import_the_notebook_side() -> None:
    """Worker kernels, templates and the netns holder import neither the engine, the launchers, the
    front ends, nor jupyter_client / zmq (ipykernel brings its own when a kernel serves)."""
    graph = import_graph()
    modules = module_names(ROOT)
    bad = [(m, t) for m, targets in graph.items() if _under(m, PROCESSES)
           for t in targets if any(_under(t, side) for side in NOTEBOOK_SIDE)]
    clients = [m for m in modules if _under(m, PROCESSES)
               and _external_imports(modules[m]) & {"jupyter_client", "zmq"}]
    assert not bad and not clients, (bad, clients)


def test_shipped_files_import_nothing_of_the_package() -> None:
    """They are sent as source to hosts where mwnotebook is not installed: they import nothing of
    the package but the shipped helpers that are sent along (processes/shipped/__init__.py)."""
    from mwnotebook.processes.shipped import HELPERS

    sent_along = {f"{SHIPPED}.{name}" for name in HELPERS}
    graph = import_graph()
    modules = module_names(ROOT)
    bad = {m: sorted(t - sent_along) for m, t in graph.items() if _under(m, SHIPPED) and t - sent_along}
    by_name = [m for m in modules if _under(m, SHIPPED) and PACKAGE in _external_imports(modules[m])]
    assert not bad and not by_name, (bad, by_name)


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_no_import_points_upward() -> None:
    assert upward_imports(import_graph()) == []


def test_the_graph_sees_known_edges() -> None:
    """Guards the reader itself: a parser that found no edges would pass the two tests above."""
    graph = import_graph()
    assert "mwnotebook.engine.workers.worker" in graph["mwnotebook.engine.async_cluster"]
    assert "mwnotebook.processes.runtime.after_import" in graph["mwnotebook.processes.runtime.tf_logs"]
    assert "mwnotebook.errors" in graph["mwnotebook.config.spec"]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert upward_imports({"mwnotebook.errors": {"mwnotebook.engine.loop"}, "mwnotebook.engine.loop": set()})
    # the public re-export sits above the front ends: importing it from frontend/ points upward
    assert upward_imports({"mwnotebook.frontend.cli.run_report": {"mwnotebook.dashboard"},
                           "mwnotebook.dashboard": set()})


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


def test_started_processes_import_without_jupyter_client() -> None:
    """A worker kernel, a worker template and the netns holder load none of the notebook's launcher
    code: their modules import with jupyter_client and zmq blocked, and bring no engine or launcher."""
    code = textwrap.dedent("""
        import sys
        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("jupyter_client", "zmq"):
                    raise ImportError(f"{name} is blocked by the test")
                return None
        sys.meta_path.insert(0, Blocker())
        import mwnotebook.processes.worker_kernel
        import mwnotebook.processes.worker_template
        import mwnotebook.processes.netns_holder
        side = sorted(m for m in sys.modules if m.startswith(("mwnotebook.engine", "mwnotebook.launchers",
                                                              "mwnotebook.frontend")))
        print("SIDE", side)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ROOT.parent, check=False)
    assert out.returncode == 0, out.stderr
    assert "SIDE []" in out.stdout, out.stdout


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
