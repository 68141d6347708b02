"""``--export DIR --format slurm`` submitted with ``sbatch`` to the real test Slurm: the batch script
and its TF_CONFIG launcher train the seed across the two nodes (no mwnotebook in the job); a ``--ps``
export runs its coordinator, worker and ps servers as the tasks of one step and ends with the chief."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.export.formats import export_format
from testbed import slurm_cluster
from testbed.ps_cells import ps_counter_cell
from testbed.seed_cell import SEED_CELL, expected_line

REPO = Path(__file__).resolve().parents[2]

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


# A coordinator counting on a ParameterServerStrategy cluster (as tests/tf/test_export_roles.py).
PS_CELL = ps_counter_cell(10, "chief total")


@pytest.mark.parametrize("cell, state, exit_code", [
    (PS_CELL, "COMPLETED", "0:0"),
    # A chief that fails at once (cheap: before TensorFlow is imported); the servers are then killed
    # by srun --kill-on-bad-exit, and the job still has the chief's status, not the killed servers'.
    ("raise SystemExit(3)\n", "FAILED", "3:0")], ids=["trains", "chief-fails"])
def test_exported_ps_job_ends_with_its_chief(slurm_env: slurm_cluster.SlurmCluster, tmp_path,
                                             cell: str, state: str, exit_code: str) -> None:
    # --slurm cannot go with --ps in a spec (config/role_checks.py): the options go on sbatch's command line.
    spec = ClusterSpec(workers=2, ps=1, cpu=True, python=sys.executable)
    export_format(cell, tmp_path, spec, "slurm")
    submitted = slurm_env.run("sbatch", "--parsable", "-N", "2", "-t", "5", "job.sbatch", cwd=str(tmp_path))
    job = submitted.stdout.strip().split(";")[0]
    # Generous hang bound: the job takes some 35 s here; servers that never stop would keep it running.
    ended = job_end(slurm_env, job, timeout=150)
    output = (tmp_path / f"slurm-{job}.out").read_text()
    assert ended == (state, exit_code), f"job {job} ended {ended}:\n{output[-3000:]}"  # the chief's status
    assert not list(tmp_path.glob(".mwnotebook-chief-*")), "the chief's status file is left behind"
    if state == "COMPLETED":
        assert "chief total 10.0" in output.splitlines(), output[-3000:]
        for task in ("worker-0", "worker-1", "ps-0"):  # every server ran, as the task of its rank
            assert f"{task} serving" in output, output[-3000:]
    # slurm_env checks afterwards that no process is left on the nodes.


def wait_for_end(slurm: slurm_cluster.SlurmCluster, job: str, timeout: float) -> str:
    """The job's final state."""
    return job_end(slurm, job, timeout)[0]


def job_end(slurm: slurm_cluster.SlurmCluster, job: str, timeout: float) -> tuple[str, str]:
    """The job's final state and ``ExitCode`` (polled often: ``sbatch --wait`` sleeps up to 10 s between
    polls, and the test Slurm forgets a finished job after MinJobAge=2 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = slurm.run("scontrol", "--oneliner", "show", "job", job, check=False).stdout
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        state = fields.get("JobState", "")
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state, fields.get("ExitCode", "")
        time.sleep(0.25)
    slurm.run("scancel", job, check=False)
    raise AssertionError(f"job {job} did not end within {timeout:.0f} s")


@pytest.mark.parametrize("nodes, node_list", [
    ("", "--nodelist={n0}"),
    # the user's node list holds the --place node: it stays the job's one node list (before, a second
    # #SBATCH --nodelist={n0} followed it, and sbatch kept the last; config/slurm_options.py place_node_args)
    (" --nodelist={prefix}[0-1]", "'--nodelist={prefix}[0-1]'")], ids=["no-node-list", "user-s-node-list"])
def test_exported_ps_job_puts_the_placed_task_on_its_node(slurm_env: slurm_cluster.SlurmCluster, tmp_path,
                                                          nodes: str, node_list: str) -> None:
    """``--place ps=mwnode0`` (node names): Slurm's block distribution alone would put the ps on the
    second node; the job's one node list holds the node (``#SBATCH --nodelist``, or the user's own) and
    slurm_tf_config.py gives the ps a rank there, so TF_CONFIG's ps address is mwnode0's and the
    servers train there."""
    n0, n1 = slurm_env.node_names
    prefix = n0.rstrip("0123456789")
    assert (n0, n1) == (f"{prefix}0", f"{prefix}1")
    address = {name: host.address for name, host in zip(slurm_env.node_names, slurm_env.nodes)}
    spec = ClusterSpec(workers=2, ps=1, cpu=True, python=sys.executable,
                       slurm="-N 2 -t 5" + nodes.format(prefix=prefix), place={"ps": (n0,)})
    cell = ("import json, os\nprint('ps at', json.loads(os.environ['TF_CONFIG'])['cluster']['ps'][0], flush=True)\n"
            + PS_CELL)
    job_files = export_format(cell, tmp_path, spec, "slurm")
    assert f"placed by --place: ps-0 on {n0}" in job_files.summary()
    batch = (tmp_path / "job.sbatch").read_text().splitlines()
    assert [line for line in batch if "nodelist" in line] == [
        "#SBATCH " + node_list.format(n0=n0, prefix=prefix)], batch
    submitted = slurm_env.run("sbatch", "--parsable", "job.sbatch", cwd=str(tmp_path))
    job = submitted.stdout.strip().split(";")[0]
    ended = job_end(slurm_env, job, timeout=150)
    output = (tmp_path / f"slurm-{job}.out").read_text()
    assert ended == ("COMPLETED", "0:0"), f"job {job} ended {ended}:\n{output[-3000:]}"
    assert f"ps at {address[n0]}:" in output, output[-3000:]
    assert "chief total 10.0" in output.splitlines(), output[-3000:]


def test_a_node_list_of_the_user_s_leaving_out_the_placed_node_is_refused_before_anything_is_written(
        slurm_env: slurm_cluster.SlurmCluster, tmp_path) -> None:
    """``mwnotebook export --format slurm --slurm "-N 1 -w mwnode1" --place ps=mwnode0``, as a user runs
    it: the two node lists disagree, so the command says so and what to do, writes nothing, and no job
    exists (before, the script carried both and sbatch silently dropped the user's mwnode1)."""
    n0, n1 = slurm_env.node_names
    cell = tmp_path / "cell.py"
    cell.write_text(PS_CELL)
    out = tmp_path / "job"
    done = subprocess.run(
        [sys.executable, "-m", "mwnotebook.frontend.cli.command", "export", "--format", "slurm", "--cpu",
         "--workers", "2", "--ps", "1", "--slurm", f"-N 1 -w {n1}", "--place", f"ps={n0}", "--out", str(out),
         str(cell)], capture_output=True, text=True, timeout=120, cwd=str(REPO), check=False)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert (f"--place ps={n0} puts tasks on {n0}, which --slurm's -w {n1} leaves out" in done.stderr
            and f"add {n0} to it (-w {n1},{n0}), or drop -w from --slurm" in done.stderr), done.stderr
    assert not out.exists()
    assert not slurm_env.jobs()
