"""A Slurm cluster publishes its job; with its owner SIGKILLed, the sweep cancels the allocation the
cluster made (``scancel``) and nothing is left on the Slurm test cluster (``slurm_env`` checks)."""

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
from tests._shared import processes, slurm_cluster

pytestmark = pytest.mark.slurm

OWNER = textwrap.dedent("""
    import time
    from mwnotebook import Cluster
    c = Cluster(slurm="-N 2", workers=2, cpu=True, template=False)
    c.start()
    print("started", flush=True)
    time.sleep(600)
""")



def wait_for(check: Any, timeout: float = 60.0) -> Any:
    return processes.wait_for(check, timeout, interval=0.1)


def test_a_killed_owners_slurm_job_is_cancelled(slurm_env: slurm_cluster.SlurmCluster, tmp_path: Path) -> None:
    directory = tmp_path / "rt" / "mwnotebook"
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")})
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "started"
        path, doc = wait_for(lambda: [(p, d) for p, d in state.read_all(directory)
                                      if (d.get("scheduler") or {}).get("job_id")])[0]
        assert doc["engine"] == "slurm" and doc["scheduler"]["owned"] is True
        job = str(doc["scheduler"]["job_id"])
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        shown = orphans.sweep_one(path, doc)
        assert shown is not None and shown["state"] == "orphaned"
        assert f"cancelled Slurm job {job}" in shown["cleanup"]
        wait_for(lambda: orphans.sweep_one(path, state.read_state(path) or doc) is None, 15)
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    # slurm_env checks that no job and no process on the nodes is left
