"""The layout's numbers for two checkouts side by side: files per folder, the largest module, import
edges, cycles, upward imports, the mypy-strict share of lines, private reaches, and how long the
started processes' modules take to import (and whether they load jupyter_client).

    git worktree add /tmp/before 31a765e        # the checkout to compare against
    python3 -m tools.layout_metrics --before /tmp/before [--after .] [--runs 5]

Each checkout is judged by its own rules: its ``tests/unit/test_import_graph.py`` (graph and
layers) and its ``pyproject.toml`` (mypy strictness, read by ``tools/strict_share.py``). Private
reaches are ruff's ``SLF001`` over ``mwnotebook`` and ``tests``: ``all`` counts every reach
(``--isolated --ignore-noqa``: no per-file opt-out, no ``noqa``), ``flagged`` what the checkout's
own ruff configuration reports. Import times alternate between the checkouts run by run, each in a
fresh interpreter with ``PYTHONPATH`` set to the checkout; the median of ``--runs`` is reported.
Writes benchmarks/results/layout_metrics/<commit>.json.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks._suite import ROOT, write_result

#: The started processes' entry modules: (name, module after the moves, module before them).
PROCESS_MODULES = [
    ("netns holder", "mwnotebook.processes.netns_holder", "mwnotebook.launchers.entry.netns_holder"),
    ("worker kernel", "mwnotebook.processes.worker_kernel", "mwnotebook.launchers.entry.worker_kernel"),
    ("worker template", "mwnotebook.processes.worker_template", "mwnotebook.launchers.entry.worker_template"),
]

_PROBE = """
import sys, time
t = time.perf_counter()
import {module}
elapsed = time.perf_counter() - t
print(repr((elapsed, "jupyter_client" in sys.modules, "zmq" in sys.modules,
            sum(1 for m in sys.modules if m.startswith("mwnotebook")))))
"""


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def folders(root: Path) -> dict[str, Any]:
    files: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    largest = ("", 0)
    for path in sorted((root / "mwnotebook").rglob("*.py")):
        folder = str(path.parent.relative_to(root))
        n = len(path.read_text().splitlines())
        files[folder] += 1
        lines[folder] += n
        if n > largest[1]:
            largest = (str(path.relative_to(root)), n)
    return {
        "files_per_folder": dict(sorted(files.items())),
        "lines_per_folder": dict(sorted(lines.items())),
        "folders": len(files),
        "most_files_in_a_folder": max(files.values()),
        "largest_module": {"path": largest[0], "lines": largest[1]},
        "modules_over_300_lines": sum(1 for p in (root / "mwnotebook").rglob("*.py")
                                      if len(p.read_text().splitlines()) > 300),
    }


def graph(root: Path) -> dict[str, Any]:
    rules = _load(root / "tests" / "unit" / "test_import_graph.py", f"import_graph_{abs(hash(root))}")
    g = rules.import_graph(root / "mwnotebook")
    return {
        "modules": len(g),
        "import_edges": sum(len(t) for t in g.values()),
        "cycles": len(rules.cycles(g)),
        "upward_imports": len(rules.upward_imports(g)),
    }


def strictness(root: Path) -> dict[str, Any]:
    share = _load(ROOT / "tools" / "strict_share.py", "strict_share").strict_share(root)
    return {k: share[k] for k in ("strict_lines", "total_lines", "strict_share", "modules_not_strict")}


def _slf001(root: Path, paths: list[str], isolated: bool) -> int:
    flags = ["--isolated", "--ignore-noqa"] if isolated else []
    out = subprocess.run([sys.executable, "-m", "ruff", "check", *flags, "--select", "SLF001",
                          "--output-format", "json", *paths], cwd=root, capture_output=True, text=True)
    return len(json.loads(out.stdout or "[]"))


def private_reaches(root: Path) -> dict[str, Any]:
    return {
        "package_all": _slf001(root, ["mwnotebook"], isolated=True),
        "tests_all": _slf001(root, ["tests"], isolated=True),
        "package_flagged": _slf001(root, ["mwnotebook"], isolated=False),
        "tests_flagged": _slf001(root, ["tests"], isolated=False),
    }


def _probe(root: Path, module: str) -> tuple[float, bool, bool, int]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", _PROBE.format(module=module)], cwd=root, env=env,
                         capture_output=True, text=True, check=True)
    elapsed, client, zmq, modules = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    return float(elapsed), bool(client), bool(zmq), int(modules)


def import_times(before: Path, after: Path, runs: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for label, new, old in PROCESS_MODULES:
        samples: dict[str, list[tuple[float, bool, bool, int]]] = {"before": [], "after": []}
        for _ in range(runs):  # alternate, so that both see the same load
            samples["before"].append(_probe(before, old))
            samples["after"].append(_probe(after, new))
        row: dict[str, Any] = {}
        for side, module in (("before", old), ("after", new)):
            s = samples[side]
            row[side] = {"module": module, "median_s": round(statistics.median(x[0] for x in s), 4),
                         "runs_s": [round(x[0], 4) for x in s], "loads_jupyter_client": s[-1][1],
                         "loads_zmq": s[-1][2], "mwnotebook_modules_loaded": s[-1][3]}
        row["ratio_after_to_before"] = round(row["after"]["median_s"] / row["before"]["median_s"], 3)
        result[label] = row
    return result


def measure(root: Path) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "mwnotebook", "pyproject.toml"], cwd=root,
                                capture_output=True, text=True).stdout.strip())
    return {"path": str(root), "commit": commit + ("+" if dirty else ""), **folders(root), **graph(root),
            "mypy": strictness(root), "private_reaches": private_reaches(root)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout to compare against")
    parser.add_argument("--after", type=Path, default=ROOT, help="checkout measured (default: this one)")
    parser.add_argument("--runs", type=int, default=5, help="interpreters per module and checkout")
    args = parser.parse_args()
    before, after = args.before.resolve(), args.after.resolve()
    payload: dict[str, Any] = {"load_average": os.getloadavg(), "before": measure(before),
                               "after": measure(after), "import_time": import_times(before, after, args.runs)}
    path = write_result("layout_metrics", payload)
    summary = {side: {k: v for k, v in payload[side].items() if k not in ("files_per_folder", "lines_per_folder")}
               for side in ("before", "after")}
    print(json.dumps({**summary, "import_time": {k: {"before_s": v["before"]["median_s"],
                                                     "after_s": v["after"]["median_s"],
                                                     "ratio": v["ratio_after_to_before"],
                                                     "jupyter_client_before": v["before"]["loads_jupyter_client"],
                                                     "jupyter_client_after": v["after"]["loads_jupyter_client"]}
                                                 for k, v in payload["import_time"].items()}}, indent=2))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
