"""``--export DIR --format slurm|tfjob``: the generated files, the Slurm TF_CONFIG launcher's pure
parts with recorded Slurm variables, and the TFJob manifest checked against Kubeflow's own TFJob v1
API definition (the Training Operator's SDK models, strictly: testbed/kubeflow_models.py; no
Kubernetes cluster is available here to apply it).
Running the exported Slurm job on a real Slurm is in tests/slurm/test_slurm_export.py."""

from __future__ import annotations

import ast
import json

import pytest
import yaml

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.errors import ConfigError
from mwnotebook.export.formats import export_format, sbatch_lines
from mwnotebook.processes.shipped import slurm_tf_config as stc
from testbed.kubeflow_models import ManifestError, validate

CELL = "import os\nprint(os.environ['TF_CONFIG'])\n"

def _documents(path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_tfjob_manifest_matches_the_v1_schema(tmp_path) -> None:
    job = export_format(CELL, tmp_path, ClusterSpec(workers=3, gpus_per_worker=1), "tfjob")
    config_map, tfjob = _documents(tmp_path / "tfjob.yaml")
    validate(config_map, "V1ConfigMap")
    validate(tfjob, "KubeflowOrgV1TFJob")
    # What the operator requires beyond the types: its API group, and the container it runs.
    assert (tfjob["apiVersion"], tfjob["kind"], config_map["apiVersion"]) == ("kubeflow.org/v1", "TFJob", "v1")
    worker = tfjob["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    pod = worker["template"]["spec"]
    assert pod["volumes"][0]["configMap"]["name"] == config_map["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["name"] == "tensorflow"  # the name the TFJob operator looks for
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    # The ConfigMap carries the same script as train.py; the operator sets TF_CONFIG, not us.
    assert config_map["data"]["train.py"] == (tmp_path / "train.py").read_text()
    assert "TF_CONFIG" not in {e["name"] for e in container["env"]}
    assert job.summary().endswith(f"kubectl apply -f {tmp_path / 'tfjob.yaml'}")


@pytest.mark.parametrize("mutate, message", [
    (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].__setitem__("replicas", "3"), "expected int, got '3'"),
    (lambda j: j["spec"].__setitem__("tfReplicaSpec", j["spec"].pop("tfReplicaSpecs")), r"unknown field\(s\) \['tfReplicaSpec'\]"),
    (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].pop("name"),
     "Invalid value for `name`, must not be `None`"),
    (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
     .append({"name": "X", "value": 1}), "expected str, got 1"),
])
def test_the_schema_catches_broken_manifests(tmp_path, mutate, message) -> None:
    export_format(CELL, tmp_path, ClusterSpec(workers=2, cpu=True), "tfjob")
    tfjob = _documents(tmp_path / "tfjob.yaml")[1]
    validate(tfjob)
    mutate(tfjob)
    with pytest.raises(ManifestError, match=message):
        validate(tfjob)


def test_slurm_batch_job_files(tmp_path) -> None:
    spec = ClusterSpec(workers=4, workers_per_host=2, slurm='-p gpu -t 01:00:00 --comment "a b"',
                       gpus_per_worker=1)
    job = export_format(CELL, tmp_path, spec, "slurm")
    assert [p.name for p in job.files] == ["train.py", "slurm_tf_config.py", "job.sbatch"]
    batch = (tmp_path / "job.sbatch").read_text().splitlines()
    sbatch = [line for line in batch if line.startswith("#SBATCH")]
    assert sbatch == ["#SBATCH --job-name=mwnotebook-train", "#SBATCH --ntasks=4", "#SBATCH --output=slurm-%j.out",
                      "#SBATCH --ntasks-per-node=2", "#SBATCH --gpus-per-task=1", "#SBATCH -p gpu",
                      "#SBATCH -t 01:00:00", "#SBATCH --comment 'a b'"]
    # #SBATCH lines must come before the first command, or sbatch ignores them.
    first_command = next(i for i, line in enumerate(batch) if line and not line.startswith("#"))
    assert all(batch.index(line) < first_command for line in sbatch)
    srun = [line for line in batch if line.startswith("srun ")]
    assert srun == ["srun --kill-on-bad-exit=1 python3 slurm_tf_config.py python3 train.py"]
    # Slurm's --gpus-per-task sets CUDA_VISIBLE_DEVICES per task; the script must not override it.
    assert not any("CUDA_VISIBLE_DEVICES" in line for line in batch)
    ast.parse((tmp_path / "slurm_tf_config.py").read_text())  # the copy is a valid script
    assert "SlurmClusterResolver" not in (tmp_path / "slurm_tf_config.py").read_text().split('"""')[2]


def test_sbatch_lines_keep_values_with_their_options() -> None:
    assert sbatch_lines(["-p", "gpu", "--time=10", "--exclusive", "-C", "a&b"]) == [
        "#SBATCH -p gpu", "#SBATCH --time=10", "#SBATCH --exclusive", "#SBATCH -C 'a&b'"]


def test_unknown_format_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="--format must be one of"):
        export_format(CELL, tmp_path, ClusterSpec(), "helm")


# -- the launcher that runs on the cluster, with variables recorded from Slurm 22.05 steps

def test_tasks_per_node_expansion() -> None:
    assert stc.expand_counts("2(x3),1") == [2, 2, 2, 1]
    assert stc.expand_counts("1") == [1]
    with pytest.raises(ValueError):
        stc.expand_counts("two")


def test_tf_config_from_slurm_variables() -> None:
    nodes = ["mwnode0", "mwnode1"]
    addresses = stc.node_addresses("NodeName=mwnode0 Arch=x86_64 NodeAddr=10.213.9.10 NodeHostName=mwnode0\n"
                                   "NodeName=mwnode1 Arch=x86_64 NodeAddr=10.213.9.11 NodeHostName=mwnode1\n")
    env = {"SLURM_PROCID": "3", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_TASKS_PER_NODE": "9"}
    config = json.loads(stc.tf_config(env, nodes, addresses))
    assert config == {"cluster": {"worker": ["10.213.9.10:12345", "10.213.9.10:12346",
                                             "10.213.9.11:12345", "10.213.9.11:12346"]},
                      "task": {"type": "worker", "index": 3}}
    env = {"SLURM_PROCID": "0", "SLURM_TASKS_PER_NODE": "1(x2)", "MWNOTEBOOK_TF_PORT": "2222"}
    assert json.loads(stc.tf_config(env, nodes, {}))["cluster"]["worker"] == ["mwnode0:2222", "mwnode1:2222"]
    with pytest.raises(ValueError, match="2 nodes but tasks per node for 1"):
        stc.tf_config({"SLURM_PROCID": "0", "SLURM_TASKS_PER_NODE": "2"}, nodes, {})


def test_launcher_outside_slurm_says_so(capsys, monkeypatch) -> None:
    for name in ("SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert stc.main(["python3", "train.py"]) == 2
    assert "not inside a Slurm job step" in capsys.readouterr().err


def test_format_reaches_the_magic_and_the_command(tmp_path) -> None:
    from mwnotebook.frontend.cli.command import main
    from mwnotebook.frontend.notebook.magics import mwtrain_parser

    assert mwtrain_parser().parse_args(["--export", "d", "--format", "tfjob"]).format == "tfjob"
    assert mwtrain_parser().parse_args(["--export", "d"]).format == "shell"
    assert mwtrain_parser().parse_args(["--export", "d", "--format", "launchers"]).format == "shell"  # its old name
    script = tmp_path / "train.py"
    script.write_text(CELL)
    assert main(["export", "--slurm", "-N 2", "--workers", "2", "--format", "slurm",
                 "--out", str(tmp_path / "job"), str(script)]) == 0
    assert "#SBATCH -N 2" in (tmp_path / "job" / "job.sbatch").read_text()
    assert not (tmp_path / "job" / "worker-0.sh").exists()
    for name in ("shell", "launchers"):  # both reach the one entry point (export/job.py) as shell scripts
        out = tmp_path / name
        assert main(["export", "--workers", "2", "--format", name, "--out", str(out), str(script)]) == 0
        assert (out / "worker-1.sh").read_text().startswith("#!")


def test_export_job_refuses_an_unknown_format_before_writing(tmp_path) -> None:
    from mwnotebook.config.spec import ClusterSpec
    from mwnotebook.errors import ConfigError
    from mwnotebook.export.job import export_job

    with pytest.raises(ConfigError, match="--format must be one of shell, slurm, tfjob"):
        export_job(CELL, tmp_path / "job", ClusterSpec(workers=2), "yaml")
    assert not (tmp_path / "job").exists()
