"""``--export DIR --format ray`` (mwnotebook/export/ray_job.py): the seed cell exported as a Ray job,
and the job run on real Ray clusters (ray_nodes.py) two ways: its entrypoint on the tier's cluster as
Ray's job supervisor runs one (a driver process on the head's machine, ``RAY_ADDRESS`` set, in the
job's working directory), and the ``ray job submit`` command the export prints, against a cluster of
its own whose head runs Ray's dashboard (the job server; it needs ``ray[default]``, which
tools/test.sh installs in a venv of its own, ``MWNOTEBOOK_RAY_DASHBOARD_ENV``, so that the tier's
other nodes stay on the minimal Ray)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mwnotebook import ClusterSpec
from mwnotebook.errors import ConfigError
from mwnotebook.export.job import export_job
from testbed import ray_nodes
from testbed.seed_cell import SEED_CELL, expected_line


def test_a_ray_export_writes_the_script_and_the_entrypoint_and_refuses_roles(tmp_path: Path) -> None:
    spec = ClusterSpec(ray="auto", workers=3, cpu=True, cpus_per_worker=2, env={"MY_SETTING": "x"})
    job = export_job("%%mwtrain --ray auto\nprint('hi')\n", tmp_path / "job", spec, "ray")
    assert [p.name for p in job.files] == ["train.py", "ray_job.py"]  # type: ignore[attr-defined]
    assert "ray job submit --address http://HEAD_HOST:8265" in job.summary()
    entry = (tmp_path / "job" / "ray_job.py").read_text()
    assert "'workers': 3" in entry and "'cpus_per_worker': 2" in entry and "'MY_SETTING': 'x'" in entry
    assert "'OMP_NUM_THREADS': '2'" in entry and "TF_CONFIG'" not in entry  # TF_CONFIG: per worker, at run time
    compile(entry, "ray_job.py", "exec")
    with pytest.raises(ConfigError, match="--format ray exports plain workers"):
        export_job("print(1)\n", tmp_path / "ps", ClusterSpec(ray="auto", ps=1, cpu=True), "ray")
    assert not (tmp_path / "ps").exists()


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_exported_ray_job_trains_the_seed_on_the_ray_cluster(ray_env: ray_nodes.RayTestCluster,
                                                                 tmp_path: Path) -> None:
    export_job(SEED_CELL, tmp_path, ClusterSpec(ray=ray_env.address, workers=2, cpu=True), "ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "MWNOTEBOOK_"))}
    done = subprocess.run([sys.executable, "ray_job.py"], cwd=tmp_path, capture_output=True, text=True, timeout=480,
                          env={**env, **ray_env.env(), "RAY_ADDRESS": ray_env.address})
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    lines = out.splitlines()
    for i in range(2):
        assert f"[worker {i}] {expected_line(i)}" in lines, out[-3000:]
        assert f"ray_job.py: worker {i} exit 0" in lines
    cluster = json.loads(next(x for x in lines if x.startswith("ray_job.py: TF_CONFIG cluster")).split(" ", 3)[3])
    # one worker on each node (SPREAD), each at a port its own actor chose there
    assert sorted(a.rsplit(":", 1)[0] for a in cluster["worker"]) == ["127.0.0.2", "127.0.0.3"], cluster


#: The venv with ray[default] (tools/test.sh makes it).
DASHBOARD_ENV = Path(os.environ.get("MWNOTEBOOK_RAY_DASHBOARD_ENV")
                     or Path.home() / ".cache" / "mwnotebook" / "ray-dashboard")


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_printed_ray_job_submit_command_runs_the_export_on_a_cluster_with_a_dashboard(tmp_path: Path) -> None:
    ray_cli = DASHBOARD_ENV / "bin" / "ray"
    if not ray_cli.exists():
        pytest.skip(f"no Ray with its dashboard at {DASHBOARD_ENV} (bash tools/test.sh makes it: ray[default])")
    job = export_job(SEED_CELL, tmp_path / "job", ClusterSpec(ray="auto", workers=2, cpu=True), "ray")
    submit = next(line.strip() for line in job.summary().splitlines() if line.strip().startswith("ray job submit"))
    cluster = ray_nodes.create(worker_cpus=(1, 1), ray_bin=str(ray_cli), dashboard=True)
    try:
        argv = shlex.split(submit.replace("http://HEAD_HOST:8265", cluster.dashboard_address))
        assert argv[:4] == ["ray", "job", "submit", "--address"], submit
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "MWNOTEBOOK_", "RAY_ADDRESS"))}
        done = subprocess.run([str(ray_cli), *argv[1:]], capture_output=True, text=True, timeout=480,
                              env={**env, **cluster.env()})
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-4000:]
        lines = [line.strip() for line in done.stdout.splitlines()]
        for i in range(2):
            assert f"[worker {i}] {expected_line(i)}" in lines, out[-4000:]
            assert f"ray_job.py: worker {i} exit 0" in lines, out[-4000:]
        assert "succeeded" in out, out[-2000:]
        placed = json.loads(next(x for x in lines if x.startswith("ray_job.py: TF_CONFIG cluster")).split(" ", 3)[3])
        # SPREAD over the two 1-CPU nodes: one worker on each
        assert sorted(a.rsplit(":", 1)[0] for a in placed["worker"]) == ["127.0.0.2", "127.0.0.3"], placed
    finally:
        cluster.destroy()
