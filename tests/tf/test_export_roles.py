"""Export of a --ps cluster (export/roles.py): ps-0.sh, worker-<i>.sh, chief.sh and serve.py,
run for real with run-local.sh on TensorFlow CPU; the servers are stopped at the end."""

from __future__ import annotations

import json
import subprocess

import psutil
import pytest

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.export.scripts import export_cell
from testbed.ps_cells import ps_counter_cell

pytestmark = [pytest.mark.tf, pytest.mark.slow]

CELL = ps_counter_cell(10, "chief total")


def test_a_ps_export_runs_as_one_script_per_task(tmp_path):
    job = export_cell(CELL, tmp_path, ClusterSpec(workers=2, ps=1, cpu=True))
    names = sorted(p.name for p in job.launchers)
    assert names == ["chief.sh", "ps-0.sh", "worker-0.sh", "worker-1.sh"]
    ps_line = (tmp_path / "ps-0.sh").read_text()
    assert "exec python3 serve.py" in ps_line and "GRPC_FAIL_FAST=use_caller" in ps_line
    config = json.loads(ps_line.split("TF_CONFIG=")[1].split("'")[1])
    assert config["task"] == {"type": "ps", "index": 0} and set(config["cluster"]) == {"chief", "worker", "ps"}
    assert "exec python3 train.py" in (tmp_path / "chief.sh").read_text()
    before = {p.pid for p in psutil.process_iter()}
    done = subprocess.run(["bash", str(job.run_local)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr + (tmp_path / "chief.log").read_text()[-3000:]
    assert "chief total 10.0" in (tmp_path / "chief.log").read_text()
    left = [p for p in psutil.process_iter(["cmdline", "cwd"]) if p.pid not in before
            and "serve.py" in " ".join(p.info["cmdline"] or []) and p.info["cwd"] == str(tmp_path.resolve())]
    assert not left, left


def test_a_chief_export_names_replica_zero_chief(tmp_path):
    job = export_cell("print(1)", tmp_path, ClusterSpec(workers=3, chief=True, evaluator=True, cpu=True))
    assert sorted(p.name for p in job.launchers) == ["chief.sh", "evaluator.sh", "worker-0.sh", "worker-1.sh"]
    evaluator = (tmp_path / "evaluator.sh").read_text()
    assert '"cluster":{"evaluator"' in evaluator and "chief" not in evaluator.split("TF_CONFIG=")[1]
