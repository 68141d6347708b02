"""The layout page (docs/reference/layout.md) made from each package's docstring, so it cannot drift.

One row per package of ``mwnotebook/`` (its folder, the process it runs in, its docstring's first
paragraph) and one line per test tier (``tests/*/``). A package or tier this file does not know yet
stops tools/docs_reference.py with an error that says what to add; a file a package docstring names
that does not exist is reported by :func:`missing_named_files` (tests/unit/test_docs_reference.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mwnotebook"

#: Which process runs each package's code (a package not named here stops the page's generation).
RUNS_IN: dict[str, str] = {
    "mwnotebook/config": "anywhere (pure)",
    "mwnotebook/course": "inside each worker kernel (the lessons' training program)",
    "mwnotebook/engine": "the notebook process",
    "mwnotebook/engine/cell": "the notebook process",
    "mwnotebook/engine/roles": "the notebook process",
    "mwnotebook/engine/workers": "the notebook process",
    "mwnotebook/export": "notebook / terminal",
    "mwnotebook/frontend": "notebook kernel / terminal",
    "mwnotebook/frontend/chart": "the notebook kernel",
    "mwnotebook/frontend/cli": "the terminal",
    "mwnotebook/frontend/notebook": "the notebook kernel",
    "mwnotebook/frontend/text": "notebook kernel / terminal",
    "mwnotebook/launchers": "the notebook process",
    "mwnotebook/launchers/local": "the notebook process",
    "mwnotebook/launchers/ray": "the notebook process; `node_relay.py` in each Ray bundle",
    "mwnotebook/launchers/remote": "the notebook process",
    "mwnotebook/launchers/slurm": "the notebook process",
    "mwnotebook/launchers/ssh": "the notebook process",
    "mwnotebook/processes": "the processes the launchers start",
    "mwnotebook/processes/runtime": "inside each worker kernel",
    "mwnotebook/processes/shipped": "remote hosts, Slurm nodes, Ray bundles, exported jobs",
    "mwnotebook/registry": "the notebook process (publishing) and the Jupyter server (reading)",
    "mwnotebook/server": "the user's Jupyter server",
    "mwnotebook/shared": "notebook and workers (pure)",
    "mwnotebook/worker": "inside each worker kernel",
    "mwnotebook/experiments": "the notebook process",
}

#: What each test tier holds (tests/<tier>/; a tier not named here stops the page's generation).
TIERS: dict[str, str] = {
    "unit": "pure logic, no kernels (the fault policy with fake workers)",
    "integration": "real kernels, no TensorFlow",
    "tf": "real TensorFlow workers",
    "reliability": "fault injection on real clusters; prints a table",
    "remote": "sshd test hosts in network namespaces; needs root",
    "slurm": "a real Slurm (munged, slurmctld and two slurmd in those namespaces); needs root and slurm-wlm",
    "ray": "a real Ray cluster (a head and two worker nodes on loopback addresses); needs Ray",
    "browser": "JupyterLab and headless Chromium",
    "panel": "the clusters panel: the Jupyter server extension's API and the sidebar in JupyterLab",
    "hub": "a real JupyterHub with several users (teaching)",
    "docs": "the docs' tools (lesson copies, reference pages), no build",
}
NOT_TIERS = {"_shared", "_plugins", "data", "__pycache__"}

INTRO = """
Folders say which process runs the code and, inside the launchers and the front ends, which backend
or front end. `ARCHITECTURE.md` in the repository has the picture in words (what runs where, how one
cell travels, which module decides each fact), `CONTRIBUTING.md` the quick loop and the test tiers,
and the [concepts page](../guide/concepts.md) the diagram. Each row below is the package's own
docstring (its `__init__.py`), so the table changes with the code.
"""

OTHER_ROWS = [
    ("`mwnotebook/` (top level)", "user code",
     "`mwnotebook` (lazy: `Cluster`, errors, ...), `errors.py` (the exception tree, failure kinds and the one "
     "failure rendering), `recipes.py`, `profiling.py`, `dashboard.py` (the chart's front door)"),
    ("`js/`", "the browser",
     "the live chart widget's JavaScript (`src/`), bundled with uPlot by esbuild (`npm ci && npm run build`, run "
     "by `hatch_build.py` during `pip install`) into `mwnotebook/frontend/chart/static/` (git-ignored, in the "
     "wheel); `MWNOTEBOOK_SKIP_JS=1` installs without it"),
    ("`labextension/`", "the browser (JupyterLab)",
     "the clusters panel's sidebar (`src/index.js`), built into `mwnotebook/server/labextension/`"),
]

OUTRO = """
Dependencies point one way, by layer: package `__init__` → dashboard, frontend → engine → launchers
→ worker, recipes, profiling, processes, export → shared, config → errors, processes/shipped. The
processes the launchers start never import the notebook's side (no jupyter_client), and the shipped
files import nothing of the package. `tests/unit/test_import_graph.py` fails on any cycle, upward
import or break of those two rules (`python tests/unit/test_import_graph.py` prints the counts).
"""


def package_doc(folder: Path) -> str:
    """The first paragraph of the package's docstring, on one line."""
    tree = ast.parse((folder / "__init__.py").read_text())
    doc = ast.get_docstring(tree) or ""
    return " ".join(doc.split("\n\n")[0].split())


def packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py")
                  if p.parent != PACKAGE and "static" not in p.parts and "labextension" not in p.parts)


def tiers() -> list[str]:
    return sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name not in NOT_TIERS)


def missing_named_files() -> list[str]:
    """Files and folders a package docstring names (``x.py``, ``x/``) that are not in that package."""
    missing = []
    for folder in packages():
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        for name in re.findall(r"``([\w/.]+(?:\.py|/))``", doc):
            candidates = [folder / name, PACKAGE / name, ROOT / name, folder.parent / name]
            if not any(c.exists() for c in candidates):
                missing.append(f"{folder.relative_to(ROOT)}: {name}")
    return missing


def _md(text: str) -> str:
    text = re.sub(r":(?:py:)?(?:class|func|meth|attr|mod|data):`~?([^`]+)`",
                  lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text).replace("|", "\\|")


def layout_page() -> str:
    rows = []
    for folder in packages():
        key = str(folder.relative_to(ROOT))
        if key not in RUNS_IN:
            raise KeyError(f"tools/docs_layout.py: add {key!r} to RUNS_IN (which process runs it)")
        rows.append(f"| `{key}/` | {RUNS_IN[key]} | {_md(package_doc(folder))} |")
    rows += [f"| {folder} | {runs} | {what} |" for folder, runs, what in OTHER_ROWS]
    tier_lines = []
    for tier in tiers():
        if tier not in TIERS:
            raise KeyError(f"tools/docs_layout.py: add tests/{tier} to TIERS (what the tier tests)")
        tier_lines.append(f"- `tests/{tier}`: {TIERS[tier]}")
    from docs_reference import GENERATED

    text = "\n".join([
        "# The repository's layout", "", GENERATED, "", INTRO.strip(), "",
        "| folder | runs in | what |", "|---|---|---|", *rows, "", OUTRO.strip(), "",
        "The test tiers (`CONTRIBUTING.md` says what each needs and how to run it):", "", *tier_lines, "",
        "Timings: `benchmarks/`. The docs: `docs/`, built by `bash tools/docs.sh`; the reference pages "
        "are made by `python tools/docs_reference.py`.", ""])
    return text
