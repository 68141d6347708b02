"""``--place`` node names and a node list in ``--slurm``: one rule (config/slurm_options.py
``place_node_args``) for the live launcher's salloc and an export's ``#SBATCH`` lines; one node list
in the job, never two, and a conflict refused before anything starts or is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from mwnotebook.config.slurm_options import expand_hostlist, place_node_args, user_nodelist
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.errors import ConfigError
from mwnotebook.export.formats import export_format
from mwnotebook.launchers.slurm.launcher import SlurmLauncher


@pytest.mark.parametrize("text, nodes", [
    ("n1", ["n1"]),
    ("n1,gpu2", ["n1", "gpu2"]),
    ("mwnode[0-2]", ["mwnode0", "mwnode1", "mwnode2"]),
    ("node[08-10,12]", ["node08", "node09", "node10", "node12"]),
    ("r[1-2]n[0-1],x", ["r1n0", "r1n1", "r2n0", "r2n1", "x"]),
])
def test_slurm_node_lists_expand(text: str, nodes: list[str]) -> None:
    assert expand_hostlist(text) == nodes


@pytest.mark.parametrize("text, says", [
    ("/home/me/nodes.txt", "names a file of nodes"),
    ("node[0-3", "unbalanced brackets"),
    ("node[3-1]", "is not a range"),
    ("node[a-b]", "is not a range"),
])
def test_node_lists_it_cannot_read_are_config_errors(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        expand_hostlist(text)


@pytest.mark.parametrize("args, found", [
    (["-N", "2"], None),
    (["-w", "a,b"], ("-w", "a,b")),
    (["-wa"], ("-w", "a")),
    (["--nodelist=a"], ("--nodelist", "a")),
    (["--nodelist", "a", "-t", "5"], ("--nodelist", "a")),
    (["-w", "a", "--nodelist=b"], ("--nodelist", "b")),  # the last one, as Slurm takes it
])
def test_the_user_s_node_list_is_found_in_every_spelling(args: list[str], found: tuple[str, str] | None) -> None:
    assert user_nodelist(args) == found


def test_without_place_nothing_is_added() -> None:
    assert place_node_args(["-N", "2", "-w", "n1"], {}, []) == []


def test_without_a_node_list_of_the_user_s_the_place_nodes_become_the_job_s() -> None:
    assert place_node_args(["-N", "3"], {"ps": ("n1",), "evaluator": ("n0",)}, ["n1", "n0", "n1"]) == [
        "--nodelist=n1,n0"]


@pytest.mark.parametrize("args", [["-w", "n[0-1]"], ["--nodelist=n0,n1"], ["-wn0"]])
def test_a_node_list_of_the_user_s_holding_the_place_nodes_is_kept_alone(args: list[str]) -> None:
    assert place_node_args(["-N", "2", *args], {"ps": ("n0",)}, ["n0"]) == []


def test_a_node_list_leaving_out_a_place_node_is_refused_naming_both_and_the_ways_out() -> None:
    with pytest.raises(ConfigError) as caught:
        place_node_args(["-N", "1", "-w", "n1"], {"ps": ("n0",)}, ["n0"])
    text = str(caught.value)
    assert text.startswith("--place ps=n0 puts tasks on n0, which --slurm's -w n1 leaves out")
    assert "add n0 to it (-w n1,n0)" in text and "drop -w from --slurm" in text and "drop --place" in text


def test_the_spec_refuses_the_conflict_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match=r"--place ps=mwnode0 puts tasks on mwnode0, which --slurm's "
                                          r"--nodelist mwnode1 leaves out"):
        ClusterSpec(workers=2, ps=1, cpu=True, slurm="-N 1 --nodelist=mwnode1", place={"ps": ("mwnode0",)})


def test_an_export_has_one_node_list_the_user_s_when_it_holds_the_place_node(tmp_path: Path) -> None:
    spec = ClusterSpec(workers=2, ps=1, cpu=True, slurm="-N 2 -w 'n[0-1]'", place={"ps": ("n0",)})
    export_format("print(1)\n", tmp_path, spec, "slurm")
    lines = (tmp_path / "job.sbatch").read_text().splitlines()
    assert [line for line in lines if "--nodelist" in line or line.startswith("#SBATCH -w")] == [
        "#SBATCH -w 'n[0-1]'"]


def test_the_live_launcher_asks_salloc_for_the_place_nodes_by_the_same_rule() -> None:
    placed = SlurmLauncher.from_spec(ClusterSpec(workers=2, ps=1, cpu=True, slurm="-N 2", place={"ps": ("n0",)}))
    assert [a for a in placed._salloc if "nodelist" in a] == ["--nodelist=n0"]  # noqa: SLF001 (the argv it runs)
    users = SlurmLauncher.from_spec(ClusterSpec(workers=2, ps=1, cpu=True, slurm="-N 2 -w n[0-1]",
                                                place={"ps": ("n0",)}))
    assert [a for a in users._salloc if "nodelist" in a or a == "-w"] == ["-w"]  # noqa: SLF001


def test_an_export_given_a_conflicting_spec_writes_nothing(tmp_path: Path) -> None:
    """The spec refuses the conflict first; export_format's own check also comes before any file."""
    spec = ClusterSpec(workers=2, ps=1, cpu=True, slurm="-N 2", place={"ps": ("n0",)})
    object.__setattr__(spec, "slurm", "-N 1 -w n1")  # as if the spec's check had been passed by
    with pytest.raises(ConfigError, match="leaves out"):
        export_format("print(1)\n", tmp_path / "job", spec, "slurm")
    assert not (tmp_path / "job").exists()
