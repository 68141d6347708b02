"""The docs' diagrams (docs/_static/diagrams/*.svg, committed) are their sources' renders
(docs/diagrams/*.dot, by tools/docs_diagrams.py with graphviz's ``dot``, which tools/test.sh installs)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("docs_diagrams", ROOT / "tools" / "docs_diagrams.py")
assert _spec is not None and _spec.loader is not None
diagrams = importlib.util.module_from_spec(_spec)
sys.modules["docs_diagrams"] = diagrams
_spec.loader.exec_module(diagrams)


def test_every_diagram_is_its_sources_render() -> None:
    assert shutil.which("dot"), "graphviz's dot is missing (tools/test.sh installs it: apt-get install graphviz)"
    assert sorted(diagrams.diagrams()) == ["local.svg", "remote.svg"]
    assert diagrams.stale() == [], "run python tools/docs_diagrams.py and commit docs/_static/diagrams/"


def test_every_diagram_is_shown_by_a_page() -> None:
    pages = "".join(p.read_text() for p in (ROOT / "docs").rglob("*.md"))
    assert [n for n in diagrams.diagrams() if f"_static/diagrams/{n}" not in pages] == []
