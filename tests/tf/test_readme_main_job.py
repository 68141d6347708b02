"""The README's main job, run as a newcomer types it (its second half: the install is the
environment this suite already runs in; a fresh-venv install is too slow for every CI run).

The command is read from README.md itself, so the test follows the README if it changes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.tf, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SEED_LINE = "[worker {i}] worker={i} replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281"


def _main_job_command() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"^pip install -e '[^']+' && (python tools/run_seed_notebook\.py)$", readme, re.M)
    assert match, "README.md no longer shows the main job as `pip install ... && python tools/run_seed_notebook.py`"
    return match.group(1).split()


def test_the_readme_main_job_prints_both_workers_result_first(tmp_path: Path) -> None:
    argv = _main_job_command()
    assert argv[0] == "python"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)  # hang bound only
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    lines = proc.stdout.splitlines()
    assert lines[:2] == [SEED_LINE.format(i=0), SEED_LINE.format(i=1)], out[-4000:]
    # The first screen is the result: no warning about the headless kernel's own transport (the tool
    # starts it on ipc), nor any other warning before the result lines.
    assert "without encryption" not in out, out[-4000:]
    assert not any("WARNING" in line for line in lines[:2]), out[-4000:]
