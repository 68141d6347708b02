"""TensorFlow's other roles on a real Slurm (two nodes, see slurm_cluster.py): a ``--ps 1 --workers
2`` cluster whose coordinator, worker servers and parameter server are job steps on the placed nodes
(``config/task_placement.py``; ``launchers/slurm/launcher.py``), and ``--chief --evaluator``.

The cells are testbed/ps_cells.py's, as tests/tf/test_ps_roles.py runs them. The ``--chief --evaluator`` test comes first
(its ``slurm_env`` checks that nothing is left after it, which the shared cluster below would
spoil); then one ``--ps`` cluster serves the tests in file order (its placement and status first,
then the stock cell three times, fit, the custom loop, a worker server killed, a parameter server
killed under ``--max-restarts``); the module's end checks that no job and no process on the nodes
is left."""

from __future__ import annotations

import io
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwnotebook import Cluster
from mwnotebook.engine.cluster_status import WorkerInfo
from mwnotebook.frontend.text.relay import TextRelay
from mwnotebook.shared.events import WorkerOutput
from testbed import slurm_cluster
from testbed.ps_cells import (
    BACKED_UP,
    EVALUATOR_CELL,
    LOOP,
    assert_fit_trains,
    fit_with_a_server_killed_at_epoch_3,
    losses,
    run_stock_fit,
)
from testbed.ps_cells import PS_FIT as FIT

pytestmark = [pytest.mark.slurm, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]


def test_chief_and_evaluator_on_the_job_s_nodes(slurm_env: slurm_cluster.SlurmCluster, tmp_path: Path) -> None:
    """``--workers 2 --chief --evaluator --place evaluator=mwnode0``: the replicas on the worker slots,
    the evaluator where --place says (the default, the last node, is unit-tested)."""
    n0, n1 = slurm_env.node_names
    with Cluster(workers=2, chief=True, evaluator=True, cpu=True, slurm="-N 2", place={"evaluator": [n0]}) as cluster:
        cluster.start()
        assert [(i.task, i.host) for i in cluster.status()] == [("chief:0", n0), ("worker:0", n1),
                                                                ("evaluator:0", n0)]
        result = cluster.run(EVALUATOR_CELL.replace("CKPT_DIR", repr(str(tmp_path))), timeout=600)
    assert "trained ['chief', 'worker']" in result.stdout(0), result.stdout(0)
    assert "evaluator TF_CONFIG cluster ['evaluator']" in result.stdout(2)
    assert "evaluated the last checkpoint" in result.stdout(2)
    assert [m for m in result.metrics if "val_loss" in str(m)], result.metrics


def test_place_naming_no_node_is_refused_by_salloc_naming_the_option(slurm_env: slurm_cluster.SlurmCluster) -> None:
    """salloc is asked for the --place nodes (config/slurm_options.py ``place_node_args``, as an export's
    job is); Slurm's refusal of an unknown one says which option named it."""
    cluster = Cluster(workers=2, ps=1, cpu=True, slurm="-N 2", place={"ps": ["gpu7"]})
    with pytest.raises(Exception, match=r"salloc failed: .*Invalid node name specified; --place ps=gpu7 asked "
                                        r"Slurm for those nodes \(--nodelist=gpu7\): name nodes of this cluster"):
        cluster.start()
    cluster.stop()  # nothing runs; no job was made (slurm_env checks)


def test_place_naming_a_drained_node_ends_the_start_within_the_timeout_naming_the_option(
        slurm_env: slurm_cluster.SlurmCluster) -> None:
    """A placed node that cannot run jobs (drained here; down alike) keeps salloc's request pending: the
    start ends at --timeout and says the --place node list is what it waits for; no job is left."""
    node = slurm_env.node_names[-1]
    slurm_env.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=mwnotebook-test")
    try:
        cluster = Cluster(workers=2, ps=1, cpu=True, slurm="-N 2", place={"ps": [node]}, startup_timeout=8)
        with pytest.raises(Exception, match=rf"was not granted within 8 s; .*--place ps={node} asked Slurm for "
                                            rf"those nodes \(--nodelist={node}\), and the job waits for all of them"):
            cluster.start()
        cluster.stop()
        assert slurm_env.jobs() == [], slurm_env.jobs()  # the pending request was cancelled
    finally:
        slurm_env.resume(node)


def test_place_naming_no_node_of_a_given_job_is_refused_with_the_job_s_nodes(slurm_env: slurm_cluster.SlurmCluster) -> None:
    """``--slurm-job J``: no salloc to ask, so the --place nodes are checked against the job's nodes."""
    granted = slurm_env.run("salloc", "--no-shell", "-N", "2", "-t", "5")
    job = re.search(r"Granted job allocation (\d+)", granted.stderr + granted.stdout)
    assert job, granted
    try:
        cluster = Cluster(workers=2, ps=1, cpu=True, slurm_job=job.group(1), place={"ps": ["gpu7"]})
        with pytest.raises(Exception, match=rf"--place ps=gpu7: gpu7 is not a node of Slurm job {job.group(1)}, "
                                            rf"whose nodes are {', '.join(slurm_env.node_names)}"):
            cluster.start()
        cluster.stop()
    finally:
        slurm_env.run("scancel", job.group(1), check=False)


@pytest.fixture(scope="module")
def ps_slurm(slurm: slurm_cluster.SlurmCluster) -> Iterator[Cluster]:
    """``--ps 1 --workers 2`` on a two-node allocation, shared by the module's --ps tests."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in slurm.env().items():
            patch.setenv(name, value)
        patch.delenv("SLURM_JOB_ID", raising=False)
        with Cluster(workers=2, ps=1, cpu=True, slurm="-N 2") as cluster:
            cluster.start()
            yield cluster
        left = slurm.wait_no_leftovers(20)
        assert not left, f"left behind on the Slurm test cluster: {left}"


def _info(cluster: Cluster, task: str) -> WorkerInfo:
    return next(i for i in cluster.status() if i.task == task)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_every_task_is_a_job_step_on_its_placed_node(ps_slurm: Cluster, slurm: slurm_cluster.SlurmCluster) -> None:
    """The default rule (config/task_placement.py) on the job's nodes in order: the worker servers on
    the worker slots (one per node), the coordinator on the first node, the ps from the last one."""
    n0, n1 = slurm.node_names
    addr = {name: host.address for name, host in zip(slurm.node_names, slurm.nodes)}
    assert len(slurm.jobs()) == 1
    infos = {i.task: i for i in ps_slurm.status()}
    assert {t: (i.host, i.role) for t, i in infos.items()} == {
        "chief:0": (n0, "coordinator"), "worker:0": (n0, "worker server"),
        "worker:1": (n1, "worker server"), "ps:0": (n1, "parameter server")}, infos
    for info in infos.values():  # each listens on its own node's address, and is alive there
        assert info.address.rsplit(":", 1)[0] == addr[info.host], info
        assert info.alive and info.pid and _alive(info.pid), info
    cluster = ps_slurm.tf_configs[0]["cluster"]
    assert [infos[t].address for t in ("chief:0", "worker:0", "worker:1", "ps:0")] == (
        cluster["chief"] + cluster["worker"] + cluster["ps"])


def test_the_stock_fit_cell_runs_three_times(ps_slurm: Cluster) -> None:
    """TensorFlow's tutorial cell three times in one cluster: from the second run on, a fresh
    coordinator kernel on its node (engine/cell/fresh_coordinator.py), the servers kept."""
    servers = dict(ps_slurm.server_pids)
    for run in range(3):
        _, notes = run_stock_fit(ps_slurm, epochs=2)
        assert len(notes) == (0 if run == 0 else 1), (run, notes)
    assert ps_slurm.server_pids == servers
    assert _info(ps_slurm, "chief:0").host == ps_slurm.workers[0].handle.host
    assert all(i.alive for i in ps_slurm.status())


def test_fit_and_the_custom_loop_train_on_the_nodes(ps_slurm: Cluster) -> None:
    # the stock cell above made its own strategy in this coordinator: mw.ps_strategy() gets a fresh one
    result = ps_slurm.run(FIT.replace("EPOCHS", "4"), timeout=300)
    values = losses(result.stdout(0), "losses")
    assert_fit_trains(values, 4)
    assert [m for m in result.metrics if "global_loss" in str(m)], result.metrics
    values = losses(ps_slurm.run(LOOP, timeout=300).stdout(0), "loop")
    assert values[-1] < values[0] * 0.5, values


def test_a_worker_server_killed_mid_fit_comes_back_on_its_address_and_the_cell_completes(ps_slurm: Cluster) -> None:
    before = _info(ps_slurm, "worker:1")
    assert before.pid is not None
    victim = before.pid
    fit_with_a_server_killed_at_epoch_3(ps_slurm, 25, lambda: os.kill(victim, signal.SIGKILL), "worker-1", victim)
    again = _info(ps_slurm, "worker:1")
    # the same node and the same address: its port stayed reserved, and the new server bound it again
    assert (again.state, again.restarts, again.alive, again.host, again.address) == (
        "serving", 1, True, before.host, before.address), again
    assert again.pid not in (None, victim) and not _alive(victim)
    host, port = again.address.rsplit(":", 1)
    probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=5).close(); print('ok')"
    assert ps_slurm.run(probe, timeout=60).stdout(0).strip() == "ok"  # the coordinator reaches it there


def test_a_killed_ps_under_max_restarts_renews_every_task_and_resumes_from_the_backup(
        ps_slurm: Cluster, tmp_path: Path) -> None:
    old = {i.task: (i.pid, i.host, i.address) for i in ps_slurm.status()}
    job = (ps_slurm.scheduler_status() or {}).get("job_id")
    cell = BACKED_UP.replace("EPOCHS", "12").replace("BACKUP", repr(str(tmp_path / "backup")))
    killed = threading.Event()

    def on_event(event: object) -> None:
        if isinstance(event, WorkerOutput) and "Epoch 4/" in event.content.get("text", "") and not killed.is_set():
            killed.set()
            os.kill(old["ps:0"][0], signal.SIGKILL)  # type: ignore[arg-type]

    result = ps_slurm.run(cell, on_event=on_event, timeout=600, max_restarts=1)
    assert killed.is_set() and result.attempts == 2, result.restarts
    assert result.restarts[0].cause.startswith("coordinator "), result.restarts
    match = re.search(r"^epochs (.*)$", result.stdout(0, attempt=2), re.M)
    assert match, result.stdout(0, attempt=2)
    epochs = [int(e) for e in match.group(1).split()]
    assert epochs == list(range(epochs[0], 12)) and epochs[0] >= 3, epochs  # resumed from the backup
    new = {i.task: (i.pid, i.host, i.address) for i in ps_slurm.status()}
    for task, (pid, host, address) in old.items():  # every task new, on its node and address again
        assert new[task][0] not in (None, pid) and new[task][1:] == (host, address), (task, old, new)
        assert not _alive(pid)  # type: ignore[arg-type]
    assert (ps_slurm.scheduler_status() or {}).get("job_id") == job  # the same allocation


def test_a_failed_node_s_tasks_move_to_the_spare_node_and_the_fit_resumes(
        slurm3_env: slurm_cluster.SlurmCluster, tmp_path: Path) -> None:
    """``-N 3 --place ps=mwnode1``: worker server 1 and the ps on mwnode1, mwnode2 spare. mwnode1 fails
    mid-fit (``scontrol update state=down``): under ``--max-restarts`` both move to mwnode2 (the
    rule of config/slurm_nodes.py), every task gets the new TF_CONFIG, and the fit resumes from its
    backup in the same job."""

    n0, n1, n2 = slurm3_env.node_names
    cell = BACKED_UP.replace("EPOCHS", "10").replace("BACKUP", repr(str(tmp_path / "backup")))
    downed: list[str] = []

    def on_event(event: object) -> None:
        if isinstance(event, WorkerOutput) and "Epoch 4/" in event.content.get("text", "") and not downed:
            slurm3_env.down(n1)
            downed.append(n1)

    try:
        with Cluster(workers=2, ps=1, cpu=True, slurm="-N 3", place={"ps": [n1]}) as cluster:
            cluster.start()
            job = slurm3_env.jobs()
            assert {i.task: i.host for i in cluster.status()} == {
                "chief:0": n0, "worker:0": n0, "worker:1": n1, "ps:0": n1}
            result = cluster.run(cell, on_event=on_event, timeout=600, max_restarts=1)
            assert downed == [n1] and result.attempts == 2, result.restarts
            assert result.restarts[0].moved == (f"node {n1} lost; worker-1, ps-0 restarted on node {n2}",)
            assert {i.task: i.host for i in cluster.status()} == {
                "chief:0": n0, "worker:0": n0, "worker:1": n2, "ps:0": n2}
            addr = {name: host.address for name, host in zip(slurm3_env.node_names, slurm3_env.nodes)}
            spec = cluster.tf_configs[0]["cluster"]
            assert [a.rsplit(":", 1)[0] for a in spec["worker"] + spec["ps"]] == [addr[n0], addr[n2], addr[n2]]
            match = re.search(r"^epochs (.*)$", result.stdout(0, attempt=2), re.M)
            assert match, result.stdout(0, attempt=2)
            epochs = [int(e) for e in match.group(1).split()]
            assert epochs == list(range(epochs[0], 10)) and epochs[0] >= 3, epochs
            assert slurm3_env.jobs() == job  # the same allocation
    finally:
        slurm3_env.resume(n1)


def test_restart_moves_the_tasks_of_a_failed_node_to_the_spare_node(slurm3_env: slurm_cluster.SlurmCluster) -> None:
    """``Cluster.restart()`` (``%mwcluster restart``) after a node failed between cells: the same rule
    as ``--max-restarts`` (config/slurm_nodes.py), not a restart on the failed node."""

    n0, n1, n2 = slurm3_env.node_names
    where = "import os; print(os.environ['SLURMD_NODENAME'])"
    try:
        with Cluster(workers=2, cpu=True, slurm="-N 3") as cluster:
            result = cluster.run(where, timeout=120)
            assert [result.stdout(i).strip() for i in range(2)] == [n0, n1]
            slurm3_env.down(n1)
            assert cluster.restart() == [f"node {n1} lost; worker 1 restarted on node {n2}"]
            result = cluster.run(where, timeout=120)
            assert [result.stdout(i).strip() for i in range(2)] == [n0, n2]
    finally:
        slurm3_env.resume(n1)


def test_a_worker_server_whose_node_failed_moves_to_the_spare_node_at_the_next_cell(
        slurm3_env: slurm_cluster.SlurmCluster) -> None:
    """``-N 3 --place ps=mwnode0``: worker server 1 alone on mwnode1, mwnode2 spare. mwnode1 fails
    mid-fit and nothing else does: the coordinator trains on with worker server 0 (it takes a worker
    back only on its old address, engine/roles/task_servers.py), worker-1's restart on the failed
    node fails and the status says it is not back; the next cell restarts the cluster with worker-1
    on mwnode2 (a new address), says so in one line, and trains."""

    n0, n1, n2 = slurm3_env.node_names
    addr = {name: host.address for name, host in zip(slurm3_env.node_names, slurm3_env.nodes)}
    downed: list[str] = []

    def down_at_epoch_3(event: object) -> None:
        if isinstance(event, WorkerOutput) and "Epoch 3/" in event.content.get("text", "") and not downed:
            slurm3_env.down(n1)
            downed.append(n1)

    try:
        with Cluster(workers=2, ps=1, cpu=True, slurm="-N 3", place={"ps": [n0]}) as cluster:
            cluster.start()
            assert {i.task: i.host for i in cluster.status()} == {
                "chief:0": n0, "worker:0": n0, "worker:1": n1, "ps:0": n0}
            result = cluster.run(FIT.replace("EPOCHS", "12"), on_event=down_at_epoch_3, timeout=600)
            assert downed == [n1] and result.attempts == 1, result.restarts
            values = losses(result.stdout(0), "losses")
            assert len(values) == 12 and values[-1] < values[0], values  # trained on without worker-1
            deadline = time.monotonic() + 180  # its restart on the failed node has to fail first
            while _info(cluster, "worker:1").state != "lost":
                assert time.monotonic() < deadline, cluster.status()
                time.sleep(0.5)
            assert "not back" in _info(cluster, "worker:1").note
            assert [i.task for i in cluster.status() if i.state == "lost"] == ["worker:1"]

            out, err = io.StringIO(), io.StringIO()
            relay = TextRelay(out, err, names=cluster.spec.layout.kernel_names())
            result = cluster.run(FIT.replace("EPOCHS", "3"), on_event=relay, timeout=600)
            relay.flush()
            notes = [line for line in err.getvalue().splitlines() if "worker server worker-1 was not back" in line]
            assert len(notes) == 1 and f"node {n1} lost; worker-1 restarted on node {n2}" in notes[0], err.getvalue()
            values = losses(result.stdout(0), "losses")
            assert len(values) == 3 and values[-1] < values[0], values
            infos = {i.task: i for i in cluster.status()}
            assert {t: i.host for t, i in infos.items()} == {
                "chief:0": n0, "worker:0": n0, "worker:1": n2, "ps:0": n0}, infos
            assert [infos[t].state for t in ("worker:0", "worker:1", "ps:0")] == ["serving"] * 3, infos
            assert infos["worker:1"].address.rsplit(":", 1)[0] == addr[n2], infos
            assert all(i.alive for i in infos.values()), infos
            assert [a.rsplit(":", 1)[0] for a in cluster.tf_configs[0]["cluster"]["worker"]] == [addr[n0], addr[n2]]
    finally:
        slurm3_env.resume(n1)
