"""Lesson 10 (notebooks/10_ray_cluster.ipynb) executed headless against the Ray test cluster: lesson 01's
program on Ray printing the seed's exact lines, Ray's own record of the placement group (a bundle per
worker, on the nodes ``%mwcluster status`` names), and a request the cluster cannot hold refused with
what it has."""

from __future__ import annotations

import re

import pytest

from testbed import ray_nodes
from testbed.lessons import execute_lesson, text_of
from testbed.seed_cell import expected_line

pytestmark = [pytest.mark.ray, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(900)]


def test_lesson_runs_the_program_on_ray_and_shows_the_placement(ray_env: ray_nodes.RayTestCluster,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MWNOTEBOOK_RAY", ray_env.address)
    nb = execute_lesson("10_ray_cluster", timeout=800)

    code = [c for c in nb.cells if c.cell_type == "code"]
    train, refused = [c for c in code if c.source.startswith("%%mwtrain")]
    lines = text_of(train).splitlines()
    for i in range(2):
        assert f"[worker {i}] {expected_line(i)}" in lines, text_of(train)[-3000:]

    placement = text_of(next(c for c in code if "placement_group_table" in c.source))
    assert "placement group: strategy SPREAD, state CREATED" in placement, placement
    bundles = dict(re.findall(r"^  bundle (\d): \{'CPU': 1\.0\} on node (\S+)$", placement, re.M))
    assert sorted(bundles) == ["0", "1"] and bundles["0"] != bundles["1"], placement
    assert set(bundles.values()) <= {node.ip for node in ray_env.workers}, (placement, ray_env.workers)
    status = text_of(next(c for c in code if c.source.strip() == "%mwcluster status"))
    for i in range(2):  # worker i runs on the node of bundle i
        assert re.search(rf"^{i}\s+{re.escape(bundles[str(i)])}\s", status, re.M), (status, bundles)

    error = "".join(o.get("evalue", "") for o in refused.outputs if o.output_type == "error")
    assert "the Ray cluster cannot hold 2 bundles of CPU 64 (SPREAD)" in error, refused.outputs
