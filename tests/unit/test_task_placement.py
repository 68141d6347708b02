"""The placement rule of config/task_placement.py: which host runs each task, and ``--place``."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from mwnotebook.config.roles import RoleLayout, Task
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.task_placement import (
    SERVER_SLOT_BASE,
    launch_slots,
    parse_place,
    place_tasks,
)
from mwnotebook.errors import ConfigError
from mwnotebook.frontend.notebook.magics import _parse, _spec, mwtrain_parser


def spec_of(line: str) -> ClusterSpec:
    return _spec(_parse(mwtrain_parser(), line))



def test_mwms_replicas_take_the_worker_slots_in_order_and_the_evaluator_the_last_host():
    layout = RoleLayout(workers=3, chief=True, evaluator=True)
    placement = place_tasks(layout, ["a", "a", "b"], ["a", "b"], {})
    assert placement.rows() == [("chief-0", "a"), ("worker-0", "a"), ("worker-1", "b"), ("evaluator-0", "b")]
    assert placement.address_hosts() == ("a", "a", "b")


def test_a_ps_cluster_puts_the_coordinator_first_and_the_ps_from_the_last_host_back():
    layout = RoleLayout(workers=2, ps=1)
    placement = place_tasks(layout, ["a", "b"], ["a", "b"], {})
    assert placement.rows() == [("chief-0", "a"), ("worker-0", "a"), ("worker-1", "b"), ("ps-0", "b")]
    # three ps over three hosts: c, b, a; a fourth wraps to c
    layout = RoleLayout(workers=3, ps=4, evaluator=True)
    placement = place_tasks(layout, ["a", "b", "c"], ["a", "b", "c"], {})
    assert [placement.host_of(Task("ps", j)) for j in range(4)] == ["c", "b", "a", "c"]
    assert placement.host_of(Task("chief", 0)) == "a"
    assert placement.host_of(Task("evaluator", 0)) == "c"
    assert placement.distinct_hosts() == ("a", "b", "c")


def test_one_host_runs_everything():
    placement = place_tasks(RoleLayout(workers=2, ps=2, evaluator=True), ["a", "a"], ["a"], {})
    assert set(placement.hosts.values()) == {"a"}


def test_place_overrides_a_role_round_robin():
    layout = RoleLayout(workers=2, ps=3, evaluator=True)
    placement = place_tasks(layout, ["a", "b"], ["a", "b"],
                            {"ps": ("x", "y"), "coordinator": ("b",), "evaluator": ("z",)})
    assert [placement.host_of(Task("ps", j)) for j in range(3)] == ["x", "y", "x"]
    assert placement.host_of(Task("chief", 0)) == "b"
    assert placement.host_of(Task("evaluator", 0)) == "z"
    assert placement.host_of(Task("worker", 1)) == "b"  # the workers follow their slots
    assert placement.distinct_hosts() == ("b", "a", "x", "y", "z")
    # --chief (MWMS): the chief replica moves off its slot
    mwms = place_tasks(RoleLayout(workers=2, chief=True), ["a", "b"], ["a", "b"], {"chief": ("c",)})
    assert mwms.address_hosts() == ("c", "b")


def test_launch_slots_name_every_task_once():
    layout = RoleLayout(workers=2, ps=1, evaluator=True)
    slots = launch_slots(layout)
    assert slots == {Task("chief", 0): 0, Task("evaluator", 0): 1, Task("worker", 0): SERVER_SLOT_BASE,
                     Task("worker", 1): SERVER_SLOT_BASE + 1, Task("ps", 0): SERVER_SLOT_BASE + 2}
    placement = place_tasks(layout, ["a", "b"], ["a", "b"], {})
    assert placement.host_of_slot(1) == "b" and placement.host_of_slot(SERVER_SLOT_BASE + 2) == "b"
    assert placement.task_at(SERVER_SLOT_BASE) == Task("worker", 0)
    with pytest.raises(ConfigError, match="launch slot 7 is no task"):
        placement.task_at(7)
    # MWMS: the replicas' slots are their cell indexes
    assert launch_slots(RoleLayout(workers=2, chief=True)) == {Task("chief", 0): 0, Task("worker", 0): 1}


@pytest.mark.parametrize("values, message", [
    (["ps"], "write ROLE=HOST"),
    (["ps="], "write ROLE=HOST"),
    (["worker=a"], "'worker' is not a role --place can move"),
    (["ps=a", "ps=b"], "given twice.*--place ps=a,b"),
])
def test_bad_place_options(values, message):
    with pytest.raises(ConfigError, match=message):
        parse_place(values)


def test_parse_place():
    assert parse_place(["ps=a, b", "evaluator=c"]) == {"ps": ("a", "b"), "evaluator": ("c",)}


@pytest.mark.parametrize("line, message", [
    ("--workers 2 --ps 1 --place ps=a", "--place applies with --hosts or --slurm"),
    ("--hosts a,b --place ps=a", "--place ps=... needs --ps P"),
    ("--hosts a,b --ps 1 --place evaluator=a", "needs --evaluator"),
    ("--hosts a,b --chief --place coordinator=a", "coordinator=... needs --ps P.*chief=HOST"),
    ("--hosts a,b --place chief=a", "needs --chief or --ps P"),
    ("--hosts a,b --ps 1 --place chief=a --place coordinator=b", "name the same task"),
    ("--hosts a,b --ps 1 --place ps=c*2", "'\\*N' counts workers"),
    ("--hosts a,b --ps 1 --place ps=bad@@host", "bad host"),
])
def test_bad_place_lines_fail_before_anything_starts(line, message):
    with pytest.raises((UsageError, ConfigError), match=message):
        spec_of(line)


def test_the_spec_places_once_and_resolves_place_hosts_against_hosts():
    spec = spec_of("--hosts alice@a:2222,b --ps 2 --evaluator --place ps=a,c:23")
    placement = spec.task_placement
    assert placement is spec.task_placement
    assert placement is not None
    assert placement.rows() == [("chief-0", "alice@a:2222"), ("worker-0", "alice@a:2222"), ("worker-1", "b"),
                                ("ps-0", "alice@a:2222"), ("ps-1", "c:23"), ("evaluator-0", "b")]
    assert spec != spec_of("--hosts alice@a:2222,b --ps 2 --evaluator")
    assert spec_of("--workers 2").task_placement is None


def test_the_ssh_launcher_starts_each_slot_and_reserves_each_address_on_its_placed_host():
    """launchers/base.py's contract for a launcher on several machines, as the SSH launcher keeps it
    (no connection is made until tf_addresses / start)."""
    from mwnotebook.launchers.ssh.launcher import SSHLauncher

    spec = ClusterSpec(hosts=("a", "b"), ps=1, evaluator=True, place={"ps": ["c:2222"]},
                       tf_address="a=10.0.0.1,c=10.0.0.3")
    launcher = SSHLauncher.from_spec(spec)
    assert [h.target for h in launcher.address_hosts(4)] == ["a", "a", "b", "c:2222"]
    slots = {slot: launcher.slot_host(slot).target for slot in (0, 1, 100, 101, 102)}
    assert slots == {0: "a", 1: "b", 100: "a", 101: "b", 102: "c:2222"}  # coordinator, evaluator, servers
    assert launcher.tf_override == {"a": "10.0.0.1", "c:2222": "10.0.0.3"}
    with pytest.raises(ConfigError, match="launch slot 2 is no task"):
        launcher.slot_host(2)
    # without a task placement (the launcher made by hand): worker slot i is slot i and address i
    plain = SSHLauncher(["a", "b"])
    assert [h.target for h in plain.address_hosts(2)] == ["a", "b"] and plain.slot_host(1).target == "b"
    with pytest.raises(ConfigError, match="3 workers requested"):
        plain.address_hosts(3)
