"""``--export`` follows the task placement (config/task_placement.py, ``--place``): the shell format
writes each task's address on its placed host and names that host in the launcher, the README and
the summary; the Slurm format puts the tasks ``--place`` names on their nodes and leaves the rest to
Slurm. Pure: files are written, nothing runs (tests/slurm/test_slurm_export.py submits one)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.export.job import export_job
from mwnotebook.processes.shipped.slurm_tf_config import parse_place, parse_tasks, placed_ranks, role_config


def _tf_config(path: Path) -> dict[str, object]:
    match = re.search(r"TF_CONFIG='([^']*)'", path.read_text())
    assert match, path.read_text()
    config: dict[str, object] = json.loads(match.group(1))
    return config


def test_shell_export_puts_each_task_on_its_placed_host(tmp_path: Path) -> None:
    spec = ClusterSpec(workers=2, ps=1, evaluator=False, cpu=True, hosts=("hosta", "hostb"),
                       place={"ps": ("hosta",)})
    job = export_job("print(1)\n", tmp_path, spec)
    # the coordinator on the first host, the worker servers on their slots, the ps where --place says
    assert job.addresses == ("hosta:12345", "hosta:12346", "hostb:12345", "hosta:12347")
    cluster = {"chief": ["hosta:12345"], "worker": ["hosta:12346", "hostb:12345"], "ps": ["hosta:12347"]}
    for name, host in (("chief", "hosta"), ("worker-0", "hosta"), ("worker-1", "hostb"), ("ps-0", "hosta")):
        launcher = tmp_path / f"{name}.sh"
        assert _tf_config(launcher)["cluster"] == cluster
        assert f"# Run it on host {host} " in launcher.read_text().splitlines()[2]
    readme = (tmp_path / "README.md").read_text()
    assert "| `ps-0.sh` | ps 0 | `hosta:12347` | hosta |" in readme
    assert "| `worker-1.sh` | worker 1 | `hostb:12345` | hostb |" in readme
    assert "as the placement says (`--hosts`, `--place`)" in readme
    assert "each launcher names its host: chief-0 on hosta, worker-0 on hosta, worker-1 on hostb, ps-0 on hosta" \
        in job.summary()


def test_a_place_host_outside_hosts_and_its_tf_address(tmp_path: Path) -> None:
    """``--place`` may name a host not in ``--hosts`` (it gets the task), ``--tf-address`` its address."""
    spec = ClusterSpec(workers=2, ps=1, evaluator=True, cpu=True, hosts=("alice@hosta", "hostb"),
                       place={"ps": ("gpu7",), "evaluator": ("hosta",)}, tf_address="gpu7=10.0.0.7")
    job = export_job("print(1)\n", tmp_path, spec)
    assert job.addresses == ("hosta:12345", "hosta:12346", "hostb:12345", "10.0.0.7:12345")
    assert "# Run it on host gpu7 " in (tmp_path / "ps-0.sh").read_text()
    assert "# Run it on host alice@hosta " in (tmp_path / "evaluator.sh").read_text()
    assert "| `evaluator.sh` | evaluator 0 | (not in the training cluster) | alice@hosta |" in \
        (tmp_path / "README.md").read_text()


def test_a_local_export_names_no_host(tmp_path: Path) -> None:
    job = export_job("print(1)\n", tmp_path, ClusterSpec(workers=2, ps=1, cpu=True))
    assert "Run it on host" not in (tmp_path / "ps-0.sh").read_text()
    assert "names its host" not in job.summary()
    assert "replace `127.0.0.1`" in (tmp_path / "README.md").read_text()


def test_slurm_export_names_the_placed_nodes_and_the_launcher_swaps_ranks(tmp_path: Path) -> None:
    """``--format slurm``: ``--place`` node names become ``#SBATCH --nodelist`` and ``MWNOTEBOOK_TF_PLACE``;
    the shipped launcher gives each placed task a rank on its node (every rank computes the same)."""
    spec = ClusterSpec(workers=2, ps=1, cpu=True, slurm="-N 2", place={"ps": ("n0",)})
    job = export_job("print(1)\n", tmp_path, spec, "slurm")
    batch = (tmp_path / "job.sbatch").read_text().splitlines()
    assert "#SBATCH --nodelist=n0" in batch and "export MWNOTEBOOK_TF_PLACE=ps:0=n0" in batch
    assert "placed by --place: ps-0 on n0" in job.summary()
    tasks = parse_tasks("chief:0 worker:0:serve worker:1:serve ps:0:serve")
    ranks = placed_ranks(tasks, ["n0", "n0", "n1", "n1"], parse_place("ps:0=n0"))
    assert [t[:2] for t in ranks] == [("ps", 0), ("worker", 0), ("worker", 1), ("chief", 0)]
    config = role_config(ranks, ["a:1", "a:2", "b:1", "b:2"], 3)  # lists stay in task-index order
    assert config == {"cluster": {"ps": ["a:1"], "worker": ["a:2", "b:1"], "chief": ["b:2"]},
                      "task": {"type": "chief", "index": 0}}
    assert placed_ranks(tasks, ["n0", "n0", "n1", "n1"], parse_place("ps:0=n1")) == tasks  # already there
    with pytest.raises(ValueError, match="--place puts ps-0 on n9, but the job step has no free task there"):
        placed_ranks(tasks, ["n0", "n0", "n1", "n1"], parse_place("ps:0=n9"))


def test_slurm_export_without_place_leaves_placement_to_slurm(tmp_path: Path) -> None:
    job = export_job("print(1)\n", tmp_path, ClusterSpec(workers=2, ps=1, cpu=True, slurm="-N 2"), "slurm")
    text = (tmp_path / "job.sbatch").read_text()
    assert "--nodelist" not in text and "MWNOTEBOOK_TF_PLACE" not in text and "placed" not in job.summary()
