"""``--format slurm`` with ``--ps``/``--chief``/``--evaluator``: the task of each Slurm rank and its
TF_CONFIG, computed by the shipped launcher (processes/shipped/slurm_tf_config.py) from recorded Slurm
variables and checked against config/roles.py's own TF_CONFIG of that task; the batch script; the
chief / server ending with real (tiny, non-TensorFlow) child processes.
Running such a job on the real test Slurm is in tests/slurm/test_slurm_export.py."""

from __future__ import annotations

import json
import sys

import pytest

from mwnotebook.config.roles import Task
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.export.formats import export_format
from mwnotebook.export.slurm_roles import slurm_tasks, tasks_variable
from mwnotebook.processes.shipped import slurm_tf_config as stc

NODES = ["mwnode0", "mwnode1"]
ADDRS = {"mwnode0": "10.0.0.1", "mwnode1": "10.0.0.2"}


def _configs(spec: ClusterSpec, tasks_per_node: str) -> list[dict]:
    env = {"SLURM_STEP_TASKS_PER_NODE": tasks_per_node, "MWNOTEBOOK_TF_TASKS": tasks_variable(spec)}
    return [json.loads(stc.tf_config({**env, "SLURM_PROCID": str(rank)}, NODES, ADDRS))
            for rank in range(len(slurm_tasks(spec)))]


@pytest.mark.parametrize("spec, per_node", [
    (ClusterSpec(workers=2, ps=1, cpu=True), "2(x2)"),
    (ClusterSpec(workers=3, ps=2, evaluator=True, cpu=True), "4,3"),
    (ClusterSpec(workers=3, chief=True, evaluator=True, cpu=True), "3,1"),
    (ClusterSpec(workers=1, evaluator=True, cpu=True), "1(x2)"),
])
def test_each_rank_gets_the_tf_config_of_its_task(spec, per_node) -> None:
    layout = spec.layout
    configs = _configs(spec, per_node)
    ranks = stc.cluster_list(NODES, ADDRS, stc.expand_counts(per_node), stc.DEFAULT_PORT)
    assert len(set(ranks)) == len(ranks)  # tasks sharing a node listen on different ports
    training = list(layout.training_tasks())
    addresses = ranks[:len(training)]  # the evaluator, if any, is the last rank
    for rank, (task, config) in enumerate(zip(slurm_tasks(spec), configs)):
        assert config["task"] == {"type": task.type, "index": task.index}
        if task.type == "evaluator":  # never in the training cluster, only itself
            assert config["cluster"] == {"evaluator": [ranks[rank]]}
        else:  # the same TF_CONFIG the notebook's own kernels get (the one rule, config/roles.py)
            assert config == layout.tf_config(addresses, task)


def test_rank_order_is_the_role_layouts() -> None:
    spec = ClusterSpec(workers=2, ps=1, evaluator=True, cpu=True)
    assert tasks_variable(spec) == "chief:0 worker:0:serve worker:1:serve ps:0:serve evaluator:0"
    assert stc.parse_tasks(tasks_variable(spec))[0] == ("chief", 0, False)
    assert tasks_variable(ClusterSpec(workers=2, chief=True, cpu=True)) == "chief:0 worker:0"
    assert slurm_tasks(ClusterSpec(workers=2, ps=1, cpu=True))[-1] == Task("ps", 0)


def test_mismatched_tasks_are_named() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_TASKS_PER_NODE": "1(x2)", "MWNOTEBOOK_TF_TASKS": "chief:0 worker:0 ps:0"}
    with pytest.raises(ValueError, match="the job step has 2 tasks but MWNOTEBOOK_TF_TASKS names 3"):
        stc.tf_config(env, NODES, ADDRS)
    with pytest.raises(ValueError, match="unexpected task 'boss:0'"):
        stc.parse_tasks("boss:0")


def test_ps_batch_job_files(tmp_path) -> None:
    job = export_format("print(1)\n", tmp_path, ClusterSpec(workers=2, ps=1, evaluator=True, cpu=True), "slurm")
    assert [p.name for p in job.files] == ["train.py", "slurm_tf_config.py", "job.sbatch", "serve.py"]
    batch = (tmp_path / "job.sbatch").read_text().splitlines()
    assert "#SBATCH --ntasks=5" in batch
    assert [line for line in batch if line.startswith("srun ")] == [
        "srun --kill-on-bad-exit=1 --distribution=block python3 slurm_tf_config.py --serve serve.py python3 train.py"]
    for needed in ("export GRPC_FAIL_FAST=use_caller", "export TF_USE_LEGACY_KERAS=1",
                   "export MWNOTEBOOK_TF_TASKS='chief:0 worker:0:serve worker:1:serve ps:0:serve evaluator:0'"):
        assert needed in batch
    assert batch[-1] == 'exit "$status"'
    assert "server.join()" in (tmp_path / "serve.py").read_text()


def test_chief_status_is_written_and_the_server_stops(tmp_path) -> None:
    done = str(tmp_path / "done")
    assert stc.run_chief([sys.executable, "-c", "raise SystemExit(3)"], done) == 3
    assert (tmp_path / "done").read_text() == "3\n"
    # A server that never ends by itself: stopped (status 0) once the chief's file is there.
    assert stc.serve_until_done([sys.executable, "-c", "import time; time.sleep(120)"], done, poll=0.05) == 0
    # A server that fails before the chief ends: its own status, so srun --kill-on-bad-exit ends the job.
    assert stc.serve_until_done([sys.executable, "-c", "raise SystemExit(5)"], str(tmp_path / "never")) == 5
