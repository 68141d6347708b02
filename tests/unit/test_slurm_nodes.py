"""Where workers of a lost Slurm node go (``config/slurm_nodes.py``): pure logic, no Slurm."""

from __future__ import annotations

import pytest

from mwnotebook.config import slurm_nodes as nodes

# ``scontrol --oneliner show node`` of Slurm 22.05, shortened to the fields read.
SHOW_NODE = (
    "NodeName=mwnode0 Arch=x86_64 CPUAlloc=1 NodeAddr=10.213.1.10 State=MIXED Partitions=test\n"
    "NodeName=mwnode1 Arch=x86_64 CPUAlloc=0 NodeAddr=10.213.1.11 State=DOWN+NOT_RESPONDING Partitions=test\n"
    "NodeName=mwnode2 Arch=x86_64 CPUAlloc=0 NodeAddr=10.213.1.12 State=IDLE+DRAIN Partitions=test\n"
    "NodeName=mwnode3 Arch=x86_64 CPUAlloc=0 NodeAddr=10.213.1.13 State=IDLE Partitions=test\n"
)


def test_node_states_and_which_can_run_steps() -> None:
    states = nodes.parse_node_states(SHOW_NODE)
    assert states == {"mwnode0": "MIXED", "mwnode1": "DOWN+NOT_RESPONDING", "mwnode2": "IDLE+DRAIN",
                      "mwnode3": "IDLE"}
    assert [n for n, s in states.items() if nodes.usable(s)] == ["mwnode0", "mwnode3"]
    assert not nodes.usable("DOWN*") and not nodes.usable("")


@pytest.mark.parametrize("args, count", [
    (["-N", "3"], 3), (["-N3"], 3), (["--nodes=2-4"], 4), (["--nodes", "5"], 5), (["-p", "gpu"], None),
    (["--nodelist=a,b"], None), ([], None),
])
def test_node_count_asked_for(args: list[str], count: int | None) -> None:
    assert nodes.asked_nodes(args) == count


def test_workers_of_a_lost_node_move_to_a_spare_node() -> None:
    plan = nodes.replace_lost(["a", "b"], healthy=["a", "c"])
    assert plan.placement == ["a", "c"]
    assert [m.line() for m in plan.moves] == ["node b lost; worker 1 restarted on node c"]
    # two workers per node move together; the second lost node takes the next spare
    plan = nodes.replace_lost(["a", "a", "b", "b"], healthy=["d", "e"])
    assert plan.placement == ["d", "d", "e", "e"]
    assert plan.moves[0].line() == "node a lost; workers 0, 1 restarted on node d"


def test_nothing_lost_changes_nothing_and_no_spare_is_said() -> None:
    assert nodes.replace_lost(["a", "b"], healthy=["a", "b", "c"]) == nodes.Replacement(["a", "b"])
    plan = nodes.replace_lost(["a", "b"], healthy=["a"])
    assert plan.placement is None and plan.unplaced == ("b",)
