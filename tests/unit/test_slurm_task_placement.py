"""Every task of a --ps / --chief / --evaluator cluster on the nodes of a Slurm job
(``launchers/slurm/launcher.py``: the rule of ``config/task_placement.py`` with the job's nodes as
the hosts, ``--place`` naming node names, a lost node's tasks moving as workers do). No Slurm: the
job is an allocation object whose nodes are set, its node states a stub."""

from __future__ import annotations

import asyncio

import pytest

from mwnotebook.config.roles import RoleLayout, Task
from mwnotebook.errors import ConfigError
from mwnotebook.launchers.slurm.job import SlurmAllocation
from mwnotebook.launchers.slurm.launcher import SlurmLauncher
from mwnotebook.launchers.slurm.shell import LocalSlurm


def job(nodes: list[str], healthy: list[str] | None = None) -> SlurmAllocation:
    allocation = SlurmAllocation("12", owned=False, shell=LocalSlurm())
    allocation.nodes = list(nodes)

    async def usable_nodes() -> list[str] | None:
        return list(nodes if healthy is None else healthy)

    allocation.usable_nodes = usable_nodes  # type: ignore[method-assign]
    return allocation


def launcher(layout: RoleLayout, place: dict[str, tuple[str, ...]] | None = None) -> SlurmLauncher:
    return SlurmLauncher(job_id="12", workers=layout.workers, layout=layout, place=place, template=False)


def test_a_ps_cluster_on_two_nodes_each_slot_on_its_node() -> None:
    slurm = launcher(RoleLayout(workers=2, ps=1))
    slurm.place_tasks_on(job(["n0", "n1"]))
    assert slurm.placement == ["n0", "n1"]
    assert slurm.tasks is not None and slurm.tasks.address_hosts() == ("n0", "n0", "n1", "n1")  # chief, w0, w1, ps0
    assert [slurm.node_of(slot) for slot in (0, 100, 101, 102)] == ["n0", "n0", "n1", "n1"]
    with pytest.raises(ConfigError, match="launch slot 1 is no task"):
        slurm.node_of(1)


def test_place_names_nodes_of_the_job_and_a_wrong_one_is_named_with_the_job_s_nodes() -> None:
    slurm = launcher(RoleLayout(workers=2, ps=2), {"ps": ("n0",), "coordinator": ("n2",)})
    slurm.place_tasks_on(job(["n0", "n1", "n2"]))
    assert slurm.tasks is not None
    assert [slurm.tasks.host_of(t) for t in (Task("chief", 0), Task("ps", 0), Task("ps", 1))] == ["n2", "n0", "n0"]
    wrong = launcher(RoleLayout(workers=2, ps=1), {"ps": ("gpu7",)})
    with pytest.raises(ConfigError, match=r"--place ps=gpu7: gpu7 is not a node of Slurm job 12, "
                                          r"whose nodes are n0, n1; name one of those"):
        wrong.place_tasks_on(job(["n0", "n1"]))


def test_the_evaluator_on_the_last_node_and_plain_workers_as_before() -> None:
    slurm = launcher(RoleLayout(workers=2, chief=True, evaluator=True))
    slurm.place_tasks_on(job(["n0", "n1"]))
    assert slurm.tasks is not None and slurm.tasks.rows() == [("chief-0", "n0"), ("worker-0", "n1"),
                                                              ("evaluator-0", "n1")]
    plain = launcher(RoleLayout(workers=3))
    plain.place_tasks_on(job(["n0", "n1"]))
    assert plain.placement == ["n0", "n0", "n1"] and [plain.node_of(i) for i in range(3)] == plain.placement


def test_a_lost_node_s_tasks_move_to_a_spare_node_and_the_line_names_them() -> None:
    slurm = launcher(RoleLayout(workers=2, ps=1))
    slurm.allocation = job(["n0", "n1", "n2"], healthy=["n0", "n2"])
    slurm.place_tasks_on(slurm.allocation)
    assert slurm.tasks is not None and slurm.tasks.host_of(Task("ps", 0)) == "n2"  # ps from the last node
    # n1 runs worker-1 only; n2 (the ps) is no spare: no node is free, the job was given -> no new one
    from mwnotebook.errors import CannotRestartError
    with pytest.raises(CannotRestartError, match="node n1 lost; no spare node"):
        asyncio.run(slurm.replace_lost_nodes())
    slurm = launcher(RoleLayout(workers=2, ps=1), {"ps": ("n1",)})
    slurm.allocation = job(["n0", "n1", "n2"], healthy=["n0", "n2"])
    slurm.place_tasks_on(slurm.allocation)
    assert asyncio.run(slurm.replace_lost_nodes()) == ["node n1 lost; worker-1, ps-0 restarted on node n2"]
    assert slurm.tasks is not None and slurm.tasks.address_hosts() == ("n0", "n0", "n2", "n2")
    assert slurm.placement == ["n0", "n2"] and slurm.node_of(102) == "n2"


def test_plain_workers_keep_their_words() -> None:
    slurm = launcher(RoleLayout(workers=2))
    slurm.allocation = job(["n0", "n1", "n2"], healthy=["n0", "n2"])
    slurm.place_tasks_on(slurm.allocation)
    assert asyncio.run(slurm.replace_lost_nodes()) == ["node n1 lost; worker 1 restarted on node n2"]
    assert slurm.placement == ["n0", "n2"]


def test_gpus_only_for_the_steps_that_compute() -> None:
    slurm = SlurmLauncher(job_id="12", workers=2, layout=RoleLayout(workers=2, ps=1), gpus_per_worker=1)
    slurm.place_tasks_on(job(["n0", "n1"]))
    assert [slurm.gpus_of(slot) for slot in (0, 100, 101, 102)] == [None, 1, 1, None]  # chief, w0, w1, ps0
    mwms = SlurmLauncher(job_id="12", workers=2, layout=RoleLayout(workers=2, evaluator=True), gpus_per_worker=1)
    mwms.place_tasks_on(job(["n0", "n1"]))
    assert [mwms.gpus_of(slot) for slot in (0, 1, 2)] == [1, 1, 1]
