"""The exported launchers, run with bash as the seed tutorial runs its scripts, reproduce the seed's published result lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.export.scripts import export_cell

pytestmark = pytest.mark.tf

SEED_SCRIPT = Path(__file__).resolve().parents[1] / "data" / "seed_train.py"
EXPECTED = "worker={i} replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281"


def shell_env() -> dict[str, str]:
    """The launchers exec ``python3``: make it this interpreter (the one with TensorFlow)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("TF_CONFIG", None)
    return env


@pytest.fixture
def job(tmp_path: Path):
    # Default ports: free loopback ports picked at export time.
    return export_cell(SEED_SCRIPT.read_text(), tmp_path / "job", ClusterSpec(workers=2, cpu=True))


def result_lines(directory: Path, i: int) -> list[str]:
    return [ln for ln in (directory / f"worker-{i}.log").read_text().splitlines() if ln.startswith("worker=")]


def test_seed_steps_8_to_10_by_hand(job) -> None:
    """Exactly the seed's shell steps: worker 0 in the background, worker 1 in the foreground, wait."""
    steps = "bash worker-0.sh > worker-0.log 2>&1 &\nbash worker-1.sh > worker-1.log 2>&1\nwait $!\n"
    proc = subprocess.run(["bash", "-c", steps], cwd=job.directory, env=shell_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for i in range(2):
        assert result_lines(job.directory, i) == [EXPECTED.format(i=i)], \
            (job.directory / f"worker-{i}.log").read_text()[-3000:]


def test_run_local_sh(job) -> None:
    proc = subprocess.run(["bash", str(job.run_local)], env=shell_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for i in range(2):
        assert result_lines(job.directory, i) == [EXPECTED.format(i=i)]
