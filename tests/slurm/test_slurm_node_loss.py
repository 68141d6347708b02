"""``--max-restarts`` on a real Slurm when a node of the job fails (``scontrol update state=down``,
what slurmctld does to a node it has lost): its worker comes back on a spare node of the same
allocation, with new TF addresses, and the cell says so; without a spare node our own job is
replaced by a new allocation; in a job the user gave that has no spare node, the cell ends at once
with the reason and no new job is made (and ``Cluster.stacks()`` of
Slurm workers, taken on their nodes). A three-node test cluster
(``slurm3`` in conftest.py), made for this module only."""

from __future__ import annotations

from pathlib import Path

import pytest

from mwnotebook import Cluster
from mwnotebook.errors import RestartFailedError
from mwnotebook.shared.events import Event, WorkerOutput
from testbed import slurm_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(400)]

#: Trains (an all-reduce per step) until the node named in FLAG is no longer one of its cluster's
#: hosts: the first attempt runs until its node fails; the attempt on the moved worker finishes.
TRAIN_UNTIL_MOVED = """
import json, os, time
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()

@tf.function
def step():
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)

total = float(step())
hosts = [w.rsplit(":", 1)[0] for w in json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]]
print("training on", os.environ.get("SLURMD_NODENAME"), "sum", total, flush=True)
while not (os.path.exists(FLAG) and open(FLAG).read() not in hosts):
    step()
    time.sleep(0.05)
print("done on", os.environ.get("SLURMD_NODENAME"), "sum", float(step()), flush=True)
"""

#: No TensorFlow: runs until killed (the job the user gave has no spare node, nothing comes back).
SLEEP = "import time\nprint('running', flush=True)\ntime.sleep(600)\n"


def down_on_first(worker: int, word: str, node: str, cluster: slurm_cluster.SlurmCluster,
                  flag: Path | None = None, address: str = "") -> tuple[list[str], object]:
    """An event observer that fails ``node`` when ``worker`` first prints ``word``."""
    downed: list[str] = []

    def observe(event: Event) -> None:
        if (isinstance(event, WorkerOutput) and event.worker == worker and not downed
                and word in event.content.get("text", "")):
            if flag is not None:
                flag.write_text(address)
            cluster.down(node)
            downed.append(node)
    return downed, observe


def test_a_failed_node_is_replaced_by_the_spare_node_of_the_allocation(slurm3_env: slurm_cluster.SlurmCluster,
                                                                       tmp_path: Path) -> None:
    n0, n1, n2 = slurm3_env.nodes
    flag = tmp_path / "lost-node"
    cell = TRAIN_UNTIL_MOVED.replace("FLAG", repr(str(flag)))
    try:
        with Cluster(slurm="-N 3", workers=2, cpu=True) as cluster:  # 3 nodes for 2 workers: one spare
            cluster.start()
            job = slurm3_env.jobs()
            hosts = [w.rsplit(":", 1)[0] for w in cluster.tf_configs[0]["cluster"]["worker"]]
            assert hosts == [n0.address, n1.address]
            downed, observe = down_on_first(1, "training on", "mwnode1", slurm3_env, flag, n1.address)
            result = cluster.run(cell, on_event=observe, timeout=300, max_restarts=2)
            assert downed == ["mwnode1"]
            [restart] = result.restarts
            assert restart.worker == 1 and restart.moved == ("node mwnode1 lost; worker 1 restarted on node mwnode2",)
            # the same job, worker 1 on the spare node, TF_CONFIG naming it: the all-reduce spans it
            assert slurm3_env.jobs() == job
            hosts = [w.rsplit(":", 1)[0] for w in cluster.tf_configs[0]["cluster"]["worker"]]
            assert hosts == [n0.address, n2.address]
            assert "done on mwnode2 sum 2.0" in result.stdout(1, attempt=2)
            assert "done on mwnode0 sum 2.0" in result.stdout(0, attempt=2)
    finally:
        slurm3_env.resume("mwnode1")


def test_a_job_the_user_gave_without_a_spare_node_ends_the_cell_with_the_reason(
        slurm3_env: slurm_cluster.SlurmCluster) -> None:
    given = slurm3_env.run("salloc", "--no-shell", "--no-kill", "-N", "2", "-n", "2").stderr
    check_the_users_job_ends_the_cell(slurm3_env, given, "node {node} lost; no spare node in allocation {job}", stacks=True)


def test_a_job_the_user_gave_without_no_kill_ends_with_its_node_and_the_cell_says_so(
        slurm3_env: slurm_cluster.SlurmCluster) -> None:
    """Without --no-kill Slurm ends the whole job when a node fails: no new job either."""
    given = slurm3_env.run("salloc", "--no-shell", "-N", "2", "-n", "2").stderr
    check_the_users_job_ends_the_cell(slurm3_env, given, "Slurm job {job} has ended", stacks=False)


def check_the_users_job_ends_the_cell(slurm3_env: slurm_cluster.SlurmCluster, given: str, reason: str,
                                      stacks: bool) -> None:
    job = given.split("Granted job allocation")[1].split()[0]
    node = "mwnode1"
    try:
        with Cluster(slurm_job=job, workers=2, template=False) as cluster:  # no TensorFlow here
            cluster.start()
            node = cluster.status()[1].host
            if stacks:  # %mwcluster stacks of Slurm workers: taken on each node by the worker's job step
                report = cluster.stacks()
                assert [w.host for w in report.workers] == [s.host for s in cluster.status()]
                assert all(w.main is not None and w.main.frames for w in report.workers), report.text()
            downed, observe = down_on_first(1, "running", node, slurm3_env)
            with pytest.raises(RestartFailedError) as info:
                cluster.run(SLEEP, on_event=observe, timeout=300, max_restarts=2)
            assert downed == [node]
            text = str(info.value)
            assert reason.format(node=node, job=job) in text, text
            assert "makes no new allocation" in text
            # at once: not the 60 s of tries a host that is away gets
            assert "cannot be started again" in text and "within" not in text
            assert set(slurm3_env.jobs()) <= {job}  # no new job was made
    finally:
        slurm3_env.run("scancel", job, check=False)
        slurm3_env.resume(node)


def test_without_a_spare_node_our_own_job_is_replaced_by_a_new_allocation(
        slurm3_env: slurm_cluster.SlurmCluster, tmp_path: Path) -> None:
    pids = tmp_path / "first-attempt-pids"
    # No TensorFlow: runs until it finds itself in kernels that were not there when the cell began.
    cell = (f"import os, time\nprint('running', flush=True)\n"
            f"while str(os.getpid()) in open({str(pids)!r}).read().split():\n    time.sleep(0.1)\n"
            "print('done in job', os.environ['SLURM_JOB_ID'], flush=True)\n")
    node = "mwnode1"
    try:
        with Cluster(slurm="-N 2", workers=2, template=False) as cluster:  # no spare node
            cluster.start()
            [old] = slurm3_env.jobs()
            status = cluster.status()
            pids.write_text(" ".join(str(s.pid) for s in status))
            node = status[1].host
            downed, observe = down_on_first(1, "running", node, slurm3_env)
            result = cluster.run(cell, on_event=observe, timeout=300, max_restarts=2)
            assert downed == [node]
            [new] = slurm3_env.jobs()
            assert new != old
            [restart] = result.restarts
            assert restart.moved == (f"node {node} lost; no spare node in allocation {old}; new allocation {new}",)
            assert result.stdout(1, attempt=2).splitlines()[-1] == f"done in job {new}"
    finally:
        slurm3_env.resume(node)
