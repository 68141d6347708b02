"""run-local.sh of a --ps export (export/roles.py run_local_roles) with stand-in task scripts: a server that
ends while the training runs stops the job at once with its log (before, the training waited for it
forever), and a training that ends stops the servers."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from mwnotebook.export.roles import run_local_roles


def _job(folder: Path, server: str, chief: str) -> Path:
    (folder / "worker-0.sh").write_text(server)
    (folder / "ps-0.sh").write_text("exec sleep 60\n")
    (folder / "chief.sh").write_text(chief)
    script = folder / "run-local.sh"
    script.write_text(run_local_roles(["worker-0.sh", "ps-0.sh"], ["chief.sh"]))
    return script


def test_a_server_that_ends_while_the_training_runs_stops_the_job_with_its_log(tmp_path: Path) -> None:
    script = _job(tmp_path, "echo 'Could not start gRPC server' >&2; exit 1\n", "exec sleep 60\n")
    started = time.monotonic()
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1, done.stderr
    assert "worker-0 ended while the training ran" in done.stderr and "Could not start gRPC server" in done.stderr
    assert time.monotonic() - started < 20  # not the chief's 60 s: it was stopped


def test_the_servers_are_stopped_when_the_training_ends(tmp_path: Path) -> None:
    script = _job(tmp_path, "exec sleep 60\n", "echo trained; exit 0\n")
    started = time.monotonic()
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "done (status 0)" in done.stdout and "ended while" not in done.stderr
    assert time.monotonic() - started < 20
