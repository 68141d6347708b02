"""Standard-library-only files sent as source to hosts where mwnotebook is not installed (or copied
into exported jobs). They import nothing of the package; :func:`source` reads one for sending.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def source(filename: str) -> str:
    """The text of one shipped file, e.g. ``source("remote_agent.py")``."""
    return _HERE.joinpath(filename).read_text(encoding="utf-8")


def path(filename: str) -> Path:
    """Where one shipped file lies in the installed package (for copying it into an exported job)."""
    return _HERE / filename
