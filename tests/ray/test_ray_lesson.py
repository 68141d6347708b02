"""Lesson 10 (notebooks/10_ray_cluster.ipynb) executed headless against the Ray test cluster: the
same cell on this machine and on Ray, one option apart, both printing the seed's exact lines."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests._shared.seed_cell import expected_line
from tests.ray import ray_nodes

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "10_ray_cluster.ipynb"


def text_of(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        for value in output.get("data", {}).values():
            parts.append(value if isinstance(value, str) else str(value))
    return "\n".join(parts)


def test_lesson_runs_the_cell_here_and_on_ray(ray_env: ray_nodes.RayTestCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MWNOTEBOOK_RAY", ray_env.address)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=800, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    out_dir = ROOT / "artifacts"
    out_dir.mkdir(exist_ok=True)
    nbformat.write(nb, out_dir / "10_ray_cluster.executed.ipynb")

    code = [c for c in nb.cells if c.cell_type == "code"]
    trains = [c for c in code if c.source.startswith("%%mwtrain")]
    assert len(trains) == 2 and trains[0].source.split("\n", 1)[1] == trains[1].source.split("\n", 1)[1]
    assert trains[1].source.split("\n", 1)[0] == trains[0].source.split("\n", 1)[0] + " --ray $RAY"
    for train in trains:
        lines = text_of(train).splitlines()
        for i in range(2):
            assert f"[worker {i}] {expected_line(i)}" in lines, text_of(train)[-3000:]
    status = text_of(next(c for c in code if c.source.strip() == "%mwcluster status"))
    for node in ray_env.workers:
        assert node.ip in status, status
