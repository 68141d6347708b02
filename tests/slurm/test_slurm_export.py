"""``--export DIR --format slurm`` submitted with ``sbatch`` to the real test Slurm: the batch script
and its TF_CONFIG launcher train the seed across the two nodes (no mwnotebook in the job)."""

from __future__ import annotations

import sys
import time

import pytest
import slurm_cluster
from seed_cell import SEED_CELL, expected_line

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.export.formats import export_format

pytestmark = [pytest.mark.slurm, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(300)]


def test_exported_batch_job_trains_on_two_nodes(slurm_env: slurm_cluster.SlurmCluster, tmp_path) -> None:
    spec = ClusterSpec(workers=2, cpu=True, slurm="-N 2 -t 5", python=sys.executable)
    export_format(SEED_CELL, tmp_path, spec, "slurm")
    submitted = slurm_env.run("sbatch", "--parsable", "job.sbatch", cwd=str(tmp_path))
    job = submitted.stdout.strip().split(";")[0]
    state = wait_for_end(slurm_env, job, timeout=240)
    output = (tmp_path / f"slurm-{job}.out").read_text()
    assert state == "COMPLETED", f"job {job} ended {state}:\n{output[-3000:]}"
    lines = output.splitlines()
    for i in range(2):
        assert expected_line(i) in lines, output[-3000:]


def wait_for_end(slurm: slurm_cluster.SlurmCluster, job: str, timeout: float) -> str:
    """The job's final state (polled often: ``sbatch --wait`` sleeps up to 10 s between polls, and the
    test Slurm forgets a finished job after MinJobAge=2 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = slurm.run("scontrol", "--oneliner", "show", "job", job, check=False).stdout
        state = next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "")
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(0.25)
    slurm.run("scancel", job, check=False)
    raise AssertionError(f"job {job} did not end within {timeout:.0f} s")
