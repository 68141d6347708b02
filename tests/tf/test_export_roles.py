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


#: A server's gRPC port was free when the export chose it and taken before the server bound it (the suite
#: starts many TensorFlow servers at once on three processes): run-local.sh then stops the job with that
#: server's log, and the export is made again (new ports).
PORT_TAKEN = "Could not start gRPC server"


def test_a_ps_export_runs_as_one_script_per_task(tmp_path):
    for attempt in range(3):
        folder = tmp_path / f"attempt-{attempt}"
        job = export_cell(CELL, folder, ClusterSpec(workers=2, ps=1, cpu=True))
        names = sorted(p.name for p in job.launchers)
        assert names == ["chief.sh", "ps-0.sh", "worker-0.sh", "worker-1.sh"]
        ps_line = (folder / "ps-0.sh").read_text()
        assert "exec python3 serve.py" in ps_line and "GRPC_FAIL_FAST=use_caller" in ps_line
        config = json.loads(ps_line.split("TF_CONFIG=")[1].split("'")[1])
        assert config["task"] == {"type": "ps", "index": 0} and set(config["cluster"]) == {"chief", "worker", "ps"}
        assert "exec python3 train.py" in (folder / "chief.sh").read_text()
        before = {p.pid for p in psutil.process_iter()}
        done = subprocess.run(["bash", str(job.run_local)], capture_output=True, text=True, timeout=300)
        if done.returncode != 0 and "ended while the training ran" in done.stderr and PORT_TAKEN in done.stderr:
            continue
        break
    assert done.returncode == 0, done.stdout + done.stderr + (folder / "chief.log").read_text()[-3000:]
    assert "chief total 10.0" in (folder / "chief.log").read_text()
    left = [p for p in psutil.process_iter(["cmdline", "cwd"]) if p.pid not in before
            and "serve.py" in " ".join(p.info["cmdline"] or []) and p.info["cwd"] == str(folder.resolve())]
    assert not left, left


def test_a_chief_export_names_replica_zero_chief(tmp_path):
    job = export_cell("print(1)", tmp_path, ClusterSpec(workers=3, chief=True, evaluator=True, cpu=True))
    assert sorted(p.name for p in job.launchers) == ["chief.sh", "evaluator.sh", "worker-0.sh", "worker-1.sh"]
    evaluator = (tmp_path / "evaluator.sh").read_text()
    assert '"cluster":{"evaluator"' in evaluator and "chief" not in evaluator.split("TF_CONFIG=")[1]
