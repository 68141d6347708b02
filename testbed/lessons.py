"""A lesson notebook executed headless for its test (notebooks/NAME.ipynb with nbclient, from the
repository's root), its executed copy saved where tools/refresh_lessons.py takes it from
(``artifacts/NAME.executed.ipynb``; it becomes the committed notebooks/executed/NAME.ipynb), and the
text of a cell's outputs."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def execute_lesson(name: str, timeout: float) -> nbformat.NotebookNode:
    """Run ``notebooks/{name}.ipynb`` (each cell within ``timeout`` seconds) in a fresh ``python3``
    kernel that inherits this process's environment; save and return the executed notebook."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    out_dir = ROOT / "artifacts"
    out_dir.mkdir(exist_ok=True)
    nbformat.write(nb, out_dir / f"{name}.executed.ipynb")
    return nb


def text_of(cell: nbformat.NotebookNode) -> str:
    """Every output of ``cell`` as text: streams, and each rich output's every representation."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        for value in output.get("data", {}).values():
            parts.append(value if isinstance(value, str) else str(value))
    return "\n".join(parts)
