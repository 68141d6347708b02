"""Lesson 10 (notebooks/10_ray_cluster.ipynb) executed headless against the Ray test cluster: the
same cell on this machine and on Ray, one option apart, both printing the seed's exact lines."""

from __future__ import annotations

import pytest

from testbed import ray_nodes
from testbed.lessons import execute_lesson, text_of
from testbed.seed_cell import expected_line

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(900)]



def test_lesson_runs_the_cell_here_and_on_ray(ray_env: ray_nodes.RayTestCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MWNOTEBOOK_RAY", ray_env.address)
    nb = execute_lesson("10_ray_cluster", timeout=800)

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
