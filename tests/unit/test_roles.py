"""TensorFlow's other roles: the task layout (config/roles.py), each task's TF_CONFIG and
environment (config/worker_env.py), the worker-side helpers (worker/_roles.py), and every bad
combination of --ps / --chief / --evaluator as a usage error before anything starts."""

import json

import pytest
from IPython.core.error import UsageError

from mwnotebook.config.roles import RoleLayout, Task
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import task_envs, worker_envs
from mwnotebook.errors import ConfigError
from mwnotebook.frontend.notebook.magics import _parse, _spec, mwtrain_parser
from mwnotebook.worker import _roles


def spec_of(line: str) -> ClusterSpec:
    return _spec(_parse(mwtrain_parser(), line))


def test_plain_layout_is_workers_only():
    layout = RoleLayout(workers=3)
    assert [t.name for t in layout.training_tasks()] == ["worker-0", "worker-1", "worker-2"]
    assert layout.cell_tasks() == layout.training_tasks() and layout.server_tasks() == ()


def test_chief_is_replica_zero():
    layout = RoleLayout(workers=3, chief=True)
    assert [t.name for t in layout.cell_tasks()] == ["chief-0", "worker-0", "worker-1"]
    assert layout.replica_task(0) == Task("chief", 0) and layout.replica_task(2) == Task("worker", 1)
    cfg = layout.tf_config(["a:1", "a:2", "a:3"], Task("worker", 0))
    assert cfg == {"cluster": {"chief": ["a:1"], "worker": ["a:2", "a:3"]}, "task": {"type": "worker", "index": 0}}


def test_parameter_server_layout():
    layout = RoleLayout(workers=2, ps=1)
    assert [t.name for t in layout.training_tasks()] == ["chief-0", "worker-0", "worker-1", "ps-0"]
    assert layout.cell_tasks() == (Task("chief", 0),)
    assert [t.name for t in layout.server_tasks()] == ["worker-0", "worker-1", "ps-0"]
    assert layout.cluster(["c:1", "w:1", "w:2", "p:1"]) == {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"]}
    with pytest.raises(ValueError, match="4 tasks"):
        layout.cluster(["c:1"])


def test_evaluator_is_never_in_the_training_cluster():
    layout = RoleLayout(workers=2, ps=1, evaluator=True)
    addresses = ["c:1", "w:1", "w:2", "p:1"]
    assert all(t.type != "evaluator" for t in layout.training_tasks())
    for task in layout.training_tasks():
        assert "evaluator" not in layout.tf_config(addresses, task)["cluster"]
    own = layout.tf_config(addresses, Task("evaluator", 0))
    assert own["task"] == {"type": "evaluator", "index": 0} and set(own["cluster"]) == {"evaluator"}


def test_ps_task_envs():
    spec = ClusterSpec(workers=2, ps=1, legacy_keras=True)
    envs = task_envs(spec, ["c:1", "w:1", "w:2", "p:1"], environ={}, gpu_count=0)
    assert set(envs) == {Task("chief", 0), Task("worker", 0), Task("worker", 1), Task("ps", 0)}
    for task, env in envs.items():
        assert env["GRPC_FAIL_FAST"] == "use_caller" and env["TF_USE_LEGACY_KERAS"] == "1"
        assert json.loads(env["TF_CONFIG"])["task"] == {"type": task.type, "index": task.index}
    assert envs[Task("ps", 0)]["CUDA_VISIBLE_DEVICES"] == "-1"
    assert envs[Task("chief", 0)]["CUDA_VISIBLE_DEVICES"] == "-1"
    assert "CUDA_VISIBLE_DEVICES" not in envs[Task("worker", 1)]  # workers keep the GPUs
    # the cell runs in the coordinator only
    cell = worker_envs(spec, ["c:1", "w:1", "w:2", "p:1"], environ={}, gpu_count=0)
    assert [json.loads(e["TF_CONFIG"])["task"]["type"] for e in cell] == ["chief"]


def test_plain_cluster_has_no_grpc_fail_fast():
    env = worker_envs(ClusterSpec(workers=2), ["a:1", "a:2"])[0]
    assert "GRPC_FAIL_FAST" not in env


@pytest.mark.parametrize("line, message", [
    ("--ps 0", "--ps must be >= 1, got 0"),
    ("--ps -1", "--ps must be >= 1, got -1"),
    ("--ps x", "--ps must be a whole number"),
    ("--ps 1 --no-legacy-keras", "--ps needs tf_keras"),
    ("--ps 1 --chief", "--chief and --ps together"),
    ("--ps 1 --collective ring", "--collective applies to MultiWorkerMirroredStrategy"),
    ("--evaluator --gpus-per-worker 2", "cannot honour"),
])
def test_bad_role_options(line, message):
    with pytest.raises((UsageError, ConfigError), match=message):
        spec_of(line)


def test_roles_are_accepted_on_slurm():
    """--ps, --chief and --evaluator place their tasks on the job's nodes (launchers/slurm/launcher.py)."""
    assert spec_of("--ps 1 --workers 2 --slurm '-N 2'").layout.parameter_server
    assert spec_of("--evaluator --chief --slurm-job 12").layout.evaluator
    assert spec_of("--ps 1 --slurm '-N 2' --place ps=node1").place == {"ps": ("node1",)}


def test_ps_spec_differs_from_plain():
    assert spec_of("--workers 2 --ps 1") != spec_of("--workers 2")
    assert spec_of("--workers 2 --chief") != spec_of("--workers 2")


def test_the_spec_derives_its_layout_once():
    """``spec.layout`` is the one derivation of the role layout: the same object on every read,
    not part of the spec's equality, and a replaced spec gets its own."""
    import dataclasses

    spec = spec_of("--workers 3 --ps 2 --evaluator")
    assert spec.layout == RoleLayout(workers=3, ps=2, evaluator=True)
    assert spec.layout is spec.layout
    assert spec == spec_of("--workers 3 --ps 2 --evaluator")
    assert dataclasses.replace(spec, evaluator=False).layout == RoleLayout(workers=3, ps=2)
    assert ClusterSpec(workers=2, chief=True).layout.kernel_names() == {}


def with_config(monkeypatch, cluster, kind, index):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}}))


def test_is_chief_with_and_without_a_chief(monkeypatch):
    with_chief = {"chief": ["a:1"], "worker": ["a:2"]}
    with_config(monkeypatch, with_chief, "chief", 0)
    assert _roles.is_chief() and _roles.cluster_workers() == 2
    with_config(monkeypatch, with_chief, "worker", 0)
    assert not _roles.is_chief()  # the tutorial's "worker 0 saves" would pick this one
    with_config(monkeypatch, {"worker": ["a:1", "a:2"]}, "worker", 0)
    assert _roles.is_chief()
    with_config(monkeypatch, {"worker": ["a:1", "a:2"]}, "worker", 1)
    assert not _roles.is_chief()


def test_save_path(monkeypatch, tmp_path):
    target = str(tmp_path / "model")
    with_config(monkeypatch, {"chief": ["a:1"], "worker": ["a:2"]}, "chief", 0)
    assert _roles.save_path(target) == target
    with_config(monkeypatch, {"chief": ["a:1"], "worker": ["a:2"]}, "worker", 0)
    other = _roles.save_path(target)
    assert other != target and other.endswith("model")


def test_replica_count_counts_the_chief(monkeypatch):
    from mwnotebook.worker import _strategy

    with_config(monkeypatch, {"chief": ["a:1"], "worker": ["a:2", "a:3"]}, "worker", 1)
    assert _strategy._worker_count() == 3


def test_the_evaluator_kernel_runs_the_cell_last_and_is_labelled():
    from mwnotebook.frontend.text import relay

    layout = RoleLayout(workers=2, chief=True, evaluator=True)
    assert [t.name for t in layout.cell_tasks()] == ["chief-0", "worker-0", "evaluator-0"]
    assert layout.kernel_names() == {2: "evaluator"}
    assert RoleLayout(workers=2, ps=1, evaluator=True).kernel_names() == {0: "coordinator", 1: "evaluator"}
    envs = worker_envs(ClusterSpec(workers=2, ps=1, evaluator=True, legacy_keras=True), ["c", "w", "w2", "p"])
    assert [e["MWNOTEBOOK_WORKER_INDEX"] for e in envs] == ["0", "1"]
    names = layout.kernel_names()
    assert relay.worker_label(2, names) == "[evaluator] " and relay.worker_label(0, names) == "[worker 0] "
    assert relay.worker_label(2) == "[worker 2] "  # no names handed in: plain replicas


def test_tfjob_export_has_the_replica_types(tmp_path):
    import json as _json

    from mwnotebook.export.formats import export_format

    job = export_format("print(1)", tmp_path, ClusterSpec(workers=2, ps=1, evaluator=True, legacy_keras=True),
                        "tfjob")
    text = next(p for p in job.files if p.suffix in (".yaml", ".yml", ".json")).read_text()
    for kind in ("Chief:", "Worker:", "PS:", "Evaluator:"):
        assert kind in text or _json.dumps(kind[:-1]) in text, kind
    assert "serve.py" in text and "GRPC_FAIL_FAST" in text


def test_slurm_export_of_roles_keeps_worker_gpus(tmp_path):
    from mwnotebook.export.formats import export_format

    export_format("print(1)", tmp_path, ClusterSpec(workers=2, ps=1, legacy_keras=True), "slurm")
    batch = (tmp_path / "job.sbatch").read_text()
    # The coordinator and ps see no GPU, the worker servers do: no job-wide CUDA_VISIBLE_DEVICES.
    assert "GRPC_FAIL_FAST=use_caller" in batch and "CUDA_VISIBLE_DEVICES" not in batch
