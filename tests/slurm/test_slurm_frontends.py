"""What users run against Slurm: the lesson notebook (lesson 01's program on Slurm, ``%mwcluster status``,
the same cell exported as a batch job and run again in the same job, then stop) executed headless, and
``mwnotebook run --slurm``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import slurm_cluster
from testbed.lessons import ROOT, execute_lesson, text_of
from testbed.seed_cell import expected_line

pytestmark = [pytest.mark.slurm, pytest.mark.remote, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]


def test_lesson_notebook_runs_the_program_on_slurm_and_exports_it(slurm_env: slurm_cluster.SlurmCluster,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MWNOTEBOOK_SLURM", "-N 2")
    monkeypatch.setenv("MWNOTEBOOK_PYTHON", sys.executable)
    nb = execute_lesson("06_laptop_ssh_slurm", timeout=500)

    code = [c for c in nb.cells if c.cell_type == "code"]
    train, exported = [c for c in code if c.source.startswith("%%mwtrain")]
    assert "--export $JOB_DIR --format slurm" in exported.source
    assert exported.source.split("\n", 1)[1] == train.source.split("\n", 1)[1]
    for cell in (train, exported):
        lines = text_of(cell).splitlines()
        for i in range(2):
            assert f"[worker {i}] {expected_line(i)}" in lines, text_of(cell)[-3000:]
    status = text_of(next(c for c in code if c.source.strip() == "%mwcluster status"))
    assert "Slurm job" in status and "(RUNNING) on mwnode0, mwnode1" in status, status
    for host in slurm_env.nodes:
        assert host.address in status
    assert "Exported a slurm job to" in text_of(exported), text_of(exported)[:2000]
    sbatch = text_of(code[code.index(exported) + 1]).splitlines()
    assert {"#SBATCH --ntasks=2", "#SBATCH -N 2"} <= set(sbatch), sbatch
    assert any(line.startswith("srun --kill-on-bad-exit=1 ") for line in sbatch), sbatch
    # %mwcluster stop cancelled the job; slurm_env checks that nothing is left on the nodes.


def test_cli_run_on_slurm_workers(slurm_env: slurm_cluster.SlurmCluster, tmp_path: Path) -> None:
    """The command's plumbing with --slurm (the seed itself runs through Slurm in the notebook and in
    test_slurm_workers.py): each worker is a task of one job on its own node, and the job ends with it."""
    script = tmp_path / "where.py"
    script.write_text("import json, os\n"
                      "print(os.environ['SLURMD_NODENAME'], os.environ['SLURM_JOB_ID'],\n"
                      "      json.loads(os.environ['TF_CONFIG'])['task']['index'])\n")
    env = {**os.environ, **slurm_env.env()}
    env.pop("TF_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "mwnotebook.frontend.cli.command", "run", "--slurm", "-N 2", "--no-report", str(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = sorted(line.split("] ", 1)[1].split() for line in done.stdout.splitlines() if line.startswith("[worker"))
    assert len(printed) == 2 and printed[0][1] == printed[1][1], done.stdout
    assert [(p[0], p[2]) for p in printed] == [("mwnode0", "0"), ("mwnode1", "1")]


def test_ctrl_c_in_a_notebook_while_the_job_is_pending(slurm_env: slurm_cluster.SlurmCluster) -> None:
    """The user's Ctrl-C (JupyterLab's interrupt button: SIGINT to the notebook kernel) while the
    cell waits in Slurm's queue: the cell ends at once with KeyboardInterrupt, our pending job is
    withdrawn, another user's job is untouched, and the notebook kernel runs the next cell."""
    from jupyter_client.manager import start_new_kernel

    busy = slurm_env.run("salloc", "--no-shell", "-N", "2", "--exclusive")
    blocker = busy.stderr.split("allocation")[-1].split()[0]
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=60, cwd=str(ROOT))
    try:
        kc.execute_interactive("%load_ext mwnotebook", timeout=60)
        msg_id = kc.execute('%%mwtrain --slurm "-N 2" --workers 2 --timeout 300\nprint("ran")')
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(slurm_env.jobs()) < 2:
            time.sleep(0.2)
        assert len(slurm_env.jobs()) == 2, "our job never reached the queue"
        interrupted = time.monotonic()
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=120)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=120)
        waited = time.monotonic() - interrupted
        assert reply["content"]["status"] == "error", reply["content"]
        assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        assert waited < 60, f"the cell ended {waited:.0f} s after Ctrl-C (the timeout is 300 s)"
        assert slurm_env.jobs() == [blocker]  # ours withdrawn, the other job untouched
        after = kc.execute_interactive("print(6 * 7)", timeout=60)
        assert after["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        slurm_env.run("scancel", blocker, check=False)
