"""TensorFlow's other roles on the SSH test hosts (``mwhost0``, ``mwhost1``): a ``--ps 1 --workers 2``
cluster with every task on the host the placement gives it (config/task_placement.py: the
coordinator and worker server 0 on mwhost0, worker server 1 and the ps on mwhost1), and
``--chief --evaluator`` with ``--place``. The cells are tests/tf/test_ps_roles.py's (the local versions).

The ``--chief --evaluator`` test comes first (its own cluster; the ``ssh_home`` fixture then finds
nothing left on the hosts). One ``--ps`` cluster serves the tests after it, in file order: the
tutorial's ``fit`` and custom loop, a worker server killed mid-fit (SIGKILL on its host: restarted
on its address, the cell completes), the stock tutorial cell three times (a fresh coordinator
kernel each rerun, on its host), then a ps killed twice: once a cause-first ``ParameterServerLost``, once under ``max_restarts`` a renewed
cluster that resumes from its ``BackupAndRestore`` backup. Nothing is left on the hosts after that
cluster either (checked when it ends).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest

from mwnotebook import Cluster
from mwnotebook.engine.roles.task_servers import ParameterServerLost
from mwnotebook.shared.events import WorkerOutput
from testbed import netns_hosts
from testbed.modules import require
from testbed.ps_cells import (
    BACKED_UP,
    EVALUATOR_CELL,
    LOOP,
    PS_FIT,
    assert_fit_trains,
    fit_with_a_server_killed_at_epoch_3,
    losses,
    ps_counter_cell,
    run_stock_fit,
)

pytestmark = [pytest.mark.remote, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def ps_cluster(test_net: netns_hosts.TestNet) -> Iterator[Cluster]:
    """``--ps 1 --workers 2`` on the two hosts, shared by the module's ``--ps`` tests."""
    require("tensorflow", "pip install -e '.[tensorflow-cpu,test]'")
    h0, h1 = test_net.hosts
    with pytest.MonkeyPatch.context() as patch:  # what the ssh_home fixture does, for the module's cluster
        patch.setenv("HOME", str(test_net.home))
        patch.setenv("MWNOTEBOOK_SSH_CONFIG", str(test_net.ssh_config))
        patch.delenv("SSH_AUTH_SOCK", raising=False)
        with Cluster(hosts=(h0.alias, h1.alias), ps=1, cpu=True) as cluster:
            cluster.start()
            yield cluster
    left = test_net.wait_no_leftovers(10)
    assert not left, f"processes left running on the test hosts: {left}"


def on_host(test_net: netns_hosts.TestNet, pid: int | None) -> str:
    """The test host whose network namespace runs ``pid`` (its alias), or ''."""
    return next((h.alias for h in test_net.hosts if pid in netns_hosts.ns_pids(h.netns)), "")


def kill_on_host(test_net: netns_hosts.TestNet, host: str, pid: int) -> None:
    """SIGKILL ``pid`` from inside ``host`` (as ``ssh host kill -9 PID`` would)."""
    target = next(h for h in test_net.hosts if h.alias == host)
    done = target.exec("kill", "-9", str(pid))
    assert done.returncode == 0, done.stderr


def tasks(cluster: Cluster) -> dict[str, tuple[str, str, int | None]]:
    """``{"ps:0": (host, address, pid), ...}`` as the status says."""
    return {i.task: (i.host, i.address, i.pid) for i in cluster.status()}


def test_chief_and_evaluator_with_the_evaluator_placed_on_a_host_not_in_hosts(ssh_home, tmp_path):
    """``--chief --evaluator`` over SSH: both replicas on mwhost0 (``--hosts mwhost0*2``), and the
    evaluator on mwhost1, which ``--place evaluator=`` names although ``--hosts`` does not (its
    agent there reserves no port: the evaluator is not in the training cluster)."""
    h0, h1 = ssh_home.hosts
    with Cluster(hosts=(f"{h0.alias}*2",), chief=True, evaluator=True, cpu=True,
                 place={"evaluator": [h1.alias]}) as cluster:
        assert cluster.spec.task_placement is not None
        assert cluster.spec.task_placement.rows() == [("chief-0", h0.alias), ("worker-0", h0.alias),
                                                      ("evaluator-0", h1.alias)]
        result = cluster.run(EVALUATOR_CELL.replace("CKPT_DIR", repr(str(tmp_path))), timeout=600)
        where = {i.task: (i.host, on_host(ssh_home, i.pid)) for i in cluster.status()}
    assert where == {"chief:0": (h0.alias, h0.alias), "worker:0": (h0.alias, h0.alias),
                     "evaluator:0": (h1.alias, h1.alias)}, where
    assert "trained ['chief', 'worker']" in result.stdout(0)  # the evaluator is not in the training cluster
    assert "evaluator TF_CONFIG cluster ['evaluator']" in result.stdout(2)
    assert "evaluated the last checkpoint" in result.stdout(2)
    assert [m for m in result.metrics if "val_loss" in str(m)], result.metrics


def test_every_task_runs_on_its_placed_host_and_fit_and_the_custom_loop_train(ps_cluster, test_net):
    h0, h1 = test_net.hosts
    placed = {"chief:0": h0, "worker:0": h0, "worker:1": h1, "ps:0": h1}
    status = tasks(ps_cluster)
    assert set(status) == set(placed)
    for task, host in placed.items():
        shown, address, pid = status[task]
        assert shown == host.alias and address.startswith(f"{host.address}:"), (task, status[task])
        assert on_host(test_net, pid) == host.alias, (task, pid)  # the process really runs there
    assert ps_cluster.server_hosts == {"worker-0": h0.alias, "worker-1": h1.alias, "ps-0": h1.alias}
    fit = losses(ps_cluster.run(PS_FIT.replace("EPOCHS", "4"), timeout=300).stdout(0), "losses")
    assert_fit_trains(fit, 4)
    loop = losses(ps_cluster.run(LOOP, timeout=300).stdout(0), "loop")
    assert loop[-1] < loop[0] * 0.5, loop


def test_a_worker_server_killed_on_its_host_mid_fit_comes_back_on_its_address(ps_cluster, test_net):
    host, address, victim = tasks(ps_cluster)["worker:1"]
    assert victim is not None
    fit_with_a_server_killed_at_epoch_3(ps_cluster, 40, lambda: kill_on_host(test_net, host, victim), "worker-1", victim)
    again = next(i for i in ps_cluster.status() if i.task == "worker:1")
    assert (again.state, again.restarts, again.alive) == ("serving", 1, True), again
    assert (again.host, again.address) == (host, address)  # the same host, the same port: bound again
    assert on_host(test_net, again.pid) == host and again.pid != victim


def test_the_stock_fit_cell_runs_three_times_in_one_cluster_with_a_fresh_coordinator(ps_cluster, test_net):
    """TensorFlow's tutorial cell three times: each rerun's second ParameterServerStrategy gets a
    fresh coordinator kernel, started on the coordinator's host; the servers keep running."""
    servers = dict(ps_cluster.server_pids)
    coordinators = []
    for run in range(3):
        _, notes = run_stock_fit(ps_cluster, epochs=3)
        # the coordinator made a strategy in the earlier tests already: every run is a rerun here
        assert len(notes) == 1 and "servers kept running" in notes[0], (run, notes)
        host, _, pid = tasks(ps_cluster)["chief:0"]
        assert host == on_host(test_net, pid) == test_net.hosts[0].alias, (run, host, pid)
        coordinators.append(pid)
    assert len(set(coordinators)) == 3  # a new kernel each time
    assert ps_cluster.server_pids == servers


def test_a_killed_ps_is_one_cause_first_error_and_with_max_restarts_the_renewed_cluster_resumes(
        ps_cluster, test_net, tmp_path):
    cell = BACKED_UP.replace("EPOCHS", "30").replace("BACKUP", repr(str(tmp_path / "backup")))

    def kill_ps_at_epoch_4(killed: threading.Event):
        host, _, pid = tasks(ps_cluster)["ps:0"]
        assert pid is not None and on_host(test_net, pid) == host == test_net.hosts[1].alias

        def on_event(event):  # epochs 1-3 are backed up before the fourth begins
            if isinstance(event, WorkerOutput) and "Epoch 4/" in event.content.get("text", "") \
                    and not killed.is_set():
                killed.set()
                kill_on_host(test_net, host, pid)
        return on_event

    killed = threading.Event()
    with pytest.raises(ParameterServerLost) as info:
        ps_cluster.run(cell, on_event=kill_ps_at_epoch_4(killed), timeout=600)
    assert str(info.value).startswith("parameter server ps-0 died (killed by SIGKILL)"), str(info.value)
    assert info.value.restarted
    assert "ps 5.0" in ps_cluster.run(ps_counter_cell(5, "ps"), timeout=300).stdout(0)  # renewed, it works
    old = tasks(ps_cluster)
    killed = threading.Event()
    result = ps_cluster.run(cell, on_event=kill_ps_at_epoch_4(killed), timeout=600, max_restarts=1)
    assert killed.is_set() and result.attempts == 2, result.restarts
    epochs = [int(e) for e in re.search(r"^epochs (.*)$", result.stdout(0, attempt=2), re.M).group(1).split()]
    assert epochs == list(range(epochs[0], 30)) and epochs[0] >= 3, epochs  # resumed from the backup
    new = tasks(ps_cluster)
    for task, (host, address, pid) in old.items():  # every task is new, where it was, on its address
        assert new[task][:2] == (host, address) and new[task][2] not in (None, pid), (task, old, new)
        assert on_host(test_net, new[task][2]) == host
