"""The layout page (docs/reference/layout.md) and CONTRIBUTING.md's tier table, made from docstrings,
so neither can drift.

One row per package of ``mwnotebook/`` (its folder, the process it runs in, its docstring's first
paragraph), one row per module of the test bed (``testbed/``, its module docstring's first paragraph)
and one row per test tier (``tests/*/``, its ``__init__.py`` docstring: what it covers, then its
``Marker:`` and ``Needs:`` lines). The same tier rows are CONTRIBUTING.md's table, between the two
``<!-- tiers ... -->`` marks (:func:`contributing`). A package this file does not know yet, or a
tier without that docstring, stops tools/docs_reference.py with an error that says what to add; a
file a package docstring names that does not exist is reported by :func:`missing_named_files`
(tests/unit/test_docs_reference.py, which also fails when CONTRIBUTING.md's table is stale).
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


def first_paragraph(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def tier_doc(tier: str) -> tuple[str, str, str]:
    """(what the tier covers, its marker, what it needs) from tests/<tier>/__init__.py's docstring."""
    path = ROOT / "tests" / tier / "__init__.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) if path.exists() else None
    fields = dict(re.findall(r"^(Marker|Needs): (.*(?:\n(?!Marker:|Needs:).+)*)", doc or "", re.M))
    if not doc or set(fields) != {"Marker", "Needs"}:
        raise KeyError(f"tools/docs_layout.py: give tests/{tier}/__init__.py a docstring: what the tier covers, "
                       "then a 'Marker: ...' line and a 'Needs: ...' line (CONTRIBUTING.md's table is made from it)")
    covers = " ".join(doc.split("\n\n")[0].split())
    return covers, " ".join(fields["Marker"].split()).rstrip("."), " ".join(fields["Needs"].split()).rstrip(".")


def testbed_modules() -> list[Path]:
    return sorted(p for p in (ROOT / "testbed").glob("*.py") if p.name != "__init__.py")


def tier_table() -> list[str]:
    """CONTRIBUTING.md's tier table: one row per tier, from its docstring."""
    rows = ["| tier | marker | what it needs | what it covers |", "|---|---|---|---|"]
    for tier in tiers():
        covers, marker, needs = (_md(part) for part in tier_doc(tier))
        rows.append(f"| `tests/{tier}` | {marker} | {needs} | {covers} |")
    return rows


#: CONTRIBUTING.md's generated region: the tier table and the test bed's modules.
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
BEGIN = "<!-- tiers: made by tools/docs_reference.py from tests/*/__init__.py and testbed/; do not edit -->"
END = "<!-- end of tiers -->"


def contributing(text: str) -> str:
    """``text`` (CONTRIBUTING.md) with its tier region made afresh."""
    if BEGIN not in text or END not in text:
        raise KeyError(f"CONTRIBUTING.md: the tier table goes between {BEGIN!r} and {END!r}")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    bed = [f"- `testbed/{p.name}`: {_md(first_paragraph(p))}" for p in testbed_modules()]
    region = [BEGIN, *tier_table(), "",
              "The test bed (`testbed/`) is what the tiers, benchmarks/ and tools/ start; test-only fakes, waits "
              "and shared checks are in `tests/_shared`, the pytest plugins in `tests/_plugins`:", "", *bed, END]
    return head + "\n".join(region) + tail


def contributing_is_stale() -> bool:
    text = CONTRIBUTING.read_text()
    return contributing(text) != text


def write_contributing() -> None:
    CONTRIBUTING.write_text(contributing(CONTRIBUTING.read_text()))


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
    tier_rows = [f"| `tests/{tier}/` | {_md(tier_doc(tier)[1])} | {_md(tier_doc(tier)[0])} |" for tier in tiers()]
    tier_rows += [f"| `tests/{name}/` | (helpers) | {_md(first_paragraph(ROOT / 'tests' / name / '__init__.py'))} |"
                  for name in ("_shared", "_plugins")]
    bed_rows = [f"| `testbed/{p.name}` | {_md(first_paragraph(p))} |" for p in testbed_modules()]
    from docs_reference import GENERATED

    text = "\n".join([
        "# The repository's layout", "", GENERATED, "", INTRO.strip(), "",
        "| folder | runs in | what |", "|---|---|---|", *rows, "", OUTRO.strip(), "",
        "## The tests", "",
        "Each tier's row is its `tests/<tier>/__init__.py` docstring (`CONTRIBUTING.md`'s tier table is made "
        "from the same docstrings and says what each tier needs):", "",
        "| folder | marker | what it covers |", "|---|---|---|", *tier_rows, "",
        "## The test bed", "",
        f"{_md(first_paragraph(ROOT / 'testbed' / '__init__.py'))} Each row is the module's docstring. "
        "No test imports another test module or a conftest, and `benchmarks/`, `tools/` and the test bed "
        "never import `tests` (`tests/unit/test_import_rules.py`).", "",
        "| module | what |", "|---|---|", *bed_rows, "",
        "Timings: `benchmarks/`. The docs: `docs/`, built by `bash tools/docs.sh`; the reference pages "
        "are made by `python tools/docs_reference.py`.", ""])
    return text
