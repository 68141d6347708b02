"""A Slurm cluster publishes its job as its launcher states it; with its owner SIGKILLed, the sweep
never signals a worker from here (they are job steps on the nodes: their own engine ends them),
cancels the allocation mwnotebook made (a bare ``--slurm``: ``scancel``), and never cancels one the
user made (``SLURM_JOB_ID`` inside ``salloc``, ``--slurm-job``). ``slurm_env`` checks afterwards that
nothing is left on the Slurm test cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mwnotebook.registry import orphans, state
from testbed import slurm_cluster
from tests._shared.waits import wait_for

pytestmark = pytest.mark.slurm

OWNER = textwrap.dedent("""
    import sys, time
    from mwnotebook import Cluster
    c = Cluster(slurm=sys.argv[1], workers=2, cpu=True, template=False)
    c.start()
    print("started", flush=True)
    time.sleep(600)
""")


def published_then_owner_killed(tmp_path: Path, slurm: str, env: dict[str, str]) -> tuple[Path, dict[str, Any]]:
    """An owner starts ``Cluster(slurm=slurm)``, publishes its job, and is SIGKILLed."""
    directory = tmp_path / "rt" / "mwnotebook"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, slurm], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), **env})
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "started"
        path, doc = wait_for(lambda: [(p, d) for p, d in state.read_all(directory)
                                      if (d.get("scheduler") or {}).get("job_id") and d["workers"]], 60)[0]
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    return path, doc


def test_a_killed_owners_bare_slurm_allocation_is_cancelled(slurm_env: slurm_cluster.SlurmCluster,
                                                            tmp_path: Path) -> None:
    """A bare ``--slurm`` (the empty string) was published as a local cluster: no job to cancel, and
    its workers' node pids were signalled here."""
    path, doc = published_then_owner_killed(tmp_path, "", {})
    assert doc["engine"] == "slurm" and doc["scheduler"]["owned"] is True
    assert not any(w["local"] or w["pid_start"] for w in doc["workers"])
    job = str(doc["scheduler"]["job_id"])
    shown = orphans.sweep_one(path, doc)
    assert shown is not None and shown["state"] == "orphaned"
    assert shown["cleanup"] == [f"cancelled Slurm job {job}"]  # and no pid killed from here
    wait_for(lambda: job not in slurm_env.jobs(), 30)
    wait_for(lambda: orphans.sweep_one(path, state.read_state(path) or doc) is None, 15)


def test_a_killed_owners_allocation_made_by_the_user_is_never_cancelled(slurm_env: slurm_cluster.SlurmCluster,
                                                                        tmp_path: Path) -> None:
    """Inside the user's ``salloc`` (``SLURM_JOB_ID``) a bare ``--slurm`` runs in that job: the sweep
    leaves the job running; the workers' job steps end by themselves (their agents' channels close)."""
    granted = slurm_env.run("salloc", "--no-shell", "-N", "2", "-n", "2")
    job = granted.stderr.split("allocation")[-1].split()[0]
    try:
        path, doc = published_then_owner_killed(tmp_path, "", {"SLURM_JOB_ID": job})
        assert doc["engine"] == "slurm" and doc["scheduler"] == {**doc["scheduler"], "job_id": job, "owned": False}
        shown = orphans.sweep_one(path, doc)
        assert shown is not None and shown["cleanup"] == []
        wait_for(lambda: not slurm_env.step_pids(), 30)  # its own engine ended the workers
        wait_for(lambda: orphans.sweep_one(path, state.read_state(path) or doc) is None, 15)
        assert job in slurm_env.jobs(), "the sweep cancelled an allocation the user made"
    finally:
        slurm_env.run("scancel", job, check=False)
