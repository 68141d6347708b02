"""``--export DIR --format slurm`` submitted with ``sbatch`` to the real test Slurm: the batch script
and its TF_CONFIG launcher train the seed across the two nodes (no mwnotebook in the job)."""

from __future__ import annotations

import sys

import pytest
import slurm_cluster
from seed_cell import SEED_CELL, expected_line

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.frontend.export_formats import export_format

pytestmark = [pytest.mark.slurm, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(300)]


def test_exported_batch_job_trains_on_two_nodes(slurm_env: slurm_cluster.SlurmCluster, tmp_path) -> None:
    spec = ClusterSpec(workers=2, cpu=True, slurm="-N 2 -t 5", python=sys.executable)
    export_format(SEED_CELL, tmp_path, spec, "slurm")
    submitted = slurm_env.run("sbatch", "--parsable", "--wait", "job.sbatch", timeout=240, check=False,
                              cwd=str(tmp_path))
    job = submitted.stdout.strip().split(";")[0]
    output = (tmp_path / f"slurm-{job}.out").read_text()
    assert submitted.returncode == 0, output[-3000:] + submitted.stderr
    lines = output.splitlines()
    for i in range(2):
        assert expected_line(i) in lines, output[-3000:]
