"""Parameter-server training on real TensorFlow (CPU): 1 ps + 2 worker servers + the coordinator
kernel that runs the cell (engine/roles/task_servers.py, worker/_ps.py). Tiny models and few steps.

One cluster serves the tests in file order (the status test reads it right after the first fit;
the two ps-kill tests renew every task of it, the second inside the cell with max_restarts); the
tests after them need other layouts and start their own clusters."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import psutil
import pytest

from mwnotebook import Cluster
from mwnotebook.engine.roles.task_servers import ParameterServerLost
from mwnotebook.shared.events import WorkerMetrics, WorkerOutput
from testbed.netns_hosts import reachable_from_peer
from testbed.ps_cells import (
    BACKED_UP,
    EVALUATOR_CELL,
    LOOP,
    PS_FIT,
    STOCK_PS_FIT,
    assert_fit_trains,
    fit_with_a_server_killed_at_epoch_3,
    losses,
    ps_counter_cell,
    run_stock_fit,
)

pytestmark = [pytest.mark.tf, pytest.mark.slow]

FIT = PS_FIT



@pytest.fixture(scope="module")
def ps_cluster():
    with Cluster(workers=2, ps=1, cpu=True) as cluster:
        cluster.start()
        yield cluster


def test_fit_trains_on_the_servers_and_only_the_coordinator_runs_the_cell(ps_cluster):
    assert set(ps_cluster.server_pids) == {"worker-0", "worker-1", "ps-0"}
    assert [c["task"] for c in ps_cluster.tf_configs] == [{"type": "chief", "index": 0}]
    result = ps_cluster.run(FIT.replace("EPOCHS", "4"), timeout=300)
    assert result.num_workers == 1
    values = losses(result.stdout(0), "losses")
    assert_fit_trains(values, 4)
    epochs = [m for m in result.metrics if "global_loss" in str(m)]
    assert epochs, result.metrics  # epoch curves reach the chart's path


def test_status_shows_every_task_with_its_role_task_address_and_process(ps_cluster):
    from mwnotebook.frontend.notebook.views import status_bundle

    infos = ps_cluster.status()
    assert [(i.role, i.task) for i in infos] == [("coordinator", "chief:0"), ("worker server", "worker:0"),
                                                 ("worker server", "worker:1"), ("parameter server", "ps:0")]
    cluster = ps_cluster.tf_configs[0]["cluster"]
    assert [i.address for i in infos] == cluster["chief"] + cluster["worker"] + cluster["ps"]
    assert all(i.alive and psutil.pid_exists(i.pid) for i in infos), infos
    assert [i.state for i in infos] == ["done", "serving", "serving", "serving"]  # "done": the fit cell ended
    # the coordinator's pid is the kernel that runs the cell; each server's TF_CONFIG names its task
    assert ps_cluster.run("import os; print(os.getpid())", timeout=60).stdout(0).strip() == str(infos[0].pid)
    assert [i.tf_config["task"] for i in infos[1:]] == [{"type": "worker", "index": 0},
                                                        {"type": "worker", "index": 1}, {"type": "ps", "index": 0}]
    # what %mwcluster status shows (frontend/notebook/magics.py renders exactly this)
    text = status_bundle(infos, ps_cluster.devices())["text/plain"]
    lines = text.splitlines()
    assert lines[0] == "mwnotebook cluster: 1 coordinator, 2 worker servers, 1 parameter server", text
    for info, line in zip(infos, lines[2:6]):
        assert line.startswith(info.role) and info.task in line and info.address in line and str(info.pid) in line
    assert "(CUDA_VISIBLE_DEVICES=-1)" in lines[2], text  # the coordinator's devices, as TF sees them


def test_verbose_1_under_ps_is_the_epoch_line_with_our_warning(ps_cluster):
    result = ps_cluster.run(FIT.replace("EPOCHS", "2").replace("verbose=2", "verbose=1"), timeout=300)
    assert len(losses(result.stdout(0), "losses")) == 2
    assert re.search(r"^20/20 - .*loss: ", result.stdout(0), re.M), result.stdout(0)  # one line per epoch
    err = result.stderr(0)
    assert "mwnotebook: verbose=1 (a progress bar updated every step) is not available" in err, err
    assert "not allowed" not in err, err


def test_custom_loop(ps_cluster):
    result = ps_cluster.run(LOOP, timeout=300)
    values = losses(result.stdout(0), "loop")
    assert values[-1] < values[0] * 0.5, values


#: LOOP with a report per scheduled step: the step function says which worker server ran it.
SERVER_CURVES = LOOP.replace("    return strategy.run(replica_fn, args=(x, y))\n", """\
    loss = strategy.run(replica_fn, args=(x, y))
    return {"loss": loss, "worker": tf.distribute.coordinator.experimental_get_current_worker_index()}
""").split("means = []")[0] + """\
for i in range(STEPS):
    mw.report(step=i, scheduled=coordinator.schedule(step, args=(iterator,)))
coordinator.join()
print("scheduled", STEPS)
"""


def test_a_custom_loop_reports_each_scheduled_step_on_the_curve_of_the_worker_server_that_ran_it(ps_cluster):
    from mwnotebook.dashboard import Dashboard
    from mwnotebook.frontend.chart.lines import chart_lines

    lines = chart_lines(ps_cluster.spec.layout, ps_cluster.spec.layout.kernel_names())
    assert (lines.kernels, lines.servers) == (1, 2)
    board = Dashboard(1, use_widget=False, lines=lines)
    result = ps_cluster.run(SERVER_CURVES.replace("STEPS", "120"), on_event=board, timeout=300)
    assert "scheduled 120" in result.stdout(0), result.stderr(0)[-2000:]
    records = [r for r in result.metrics if "loss" in r]
    assert sorted(r["step"] for r in records) == list(range(120))  # each step once, none lost
    assert {r["worker"] for r in records} == {0}  # sent by the coordinator kernel...
    by_server = {s: [r for r in records if r["server"] == s] for s in (0, 1)}
    assert all(by_server.values()), {s: len(v) for s, v in by_server.items()}  # ...computed on both servers
    ordered = [r["loss"] for r in sorted(records, key=lambda r: r["step"])]
    assert sum(ordered[-10:]) < 0.5 * sum(ordered[:10]), ordered
    for server, mine in by_server.items():  # the chart draws each on its server's own line
        steps, _values = board.store.local_series(lines.kernels + server, "loss")
        assert sorted(steps) == sorted(r["step"] for r in mine)
    assert not len(board.store.local_series(0, "loss")[0])  # nothing on the coordinator's line


def test_a_stock_mwms_cell_is_told_which_strategy_the_cluster_is_for(ps_cluster):
    with pytest.raises(Exception) as info:
        ps_cluster.run("import tensorflow as tf\ntf.distribute.MultiWorkerMirroredStrategy()", timeout=120)
    assert "parameter-server cluster" in str(info.value) and "ParameterServerStrategy" in str(info.value)


def _pid_of(cluster: Cluster, task: str) -> int:
    """The pid the status names for ``task`` (``"worker:0"``): the faults below go where it says."""
    pid = next(i.pid for i in cluster.status() if i.task == task)
    assert pid is not None
    return pid


def test_a_worker_killed_mid_fit_is_restarted_and_the_cell_completes(ps_cluster):
    victim = _pid_of(ps_cluster, "worker:0")
    assert victim == ps_cluster.server_pids["worker-0"]
    fit_with_a_server_killed_at_epoch_3(ps_cluster, 40, lambda: os.kill(victim, signal.SIGKILL), "worker-0", victim)
    again = next(i for i in ps_cluster.status() if i.task == "worker:0")
    assert (again.state, again.restarts, again.alive) == ("serving", 1, True) and again.pid not in (None, victim)


def test_a_worker_server_killed_mid_custom_loop_leaves_the_loop_and_its_curves_going(ps_cluster):
    victim = _pid_of(ps_cluster, "worker:1")  # worker:0 was killed above; its restart count is checked there
    killed = threading.Event()

    def on_event(event):  # kill once records are flowing, while steps are still being scheduled
        if isinstance(event, WorkerMetrics) and not killed.is_set() and any(
                r.get("step", 0) >= 40 for r in event.records):
            os.kill(victim, signal.SIGKILL)
            killed.set()

    result = ps_cluster.run(SERVER_CURVES.replace("STEPS", "600"), on_event=on_event, timeout=600)
    assert killed.is_set()
    assert "scheduled 600" in result.stdout(0), result.stderr(0)[-2000:]  # the loop was not broken
    steps = [r["step"] for r in result.metrics if "loss" in r]
    assert len(steps) == len(set(steps)) and set(steps) <= set(range(600)), steps
    missing = 600 - len(steps)  # a rescheduled step reports once it ran again; an aborted one is dropped
    assert missing == 0 or "dropped" in result.stderr(0), (missing, result.stderr(0)[-2000:])
    late = [r for r in result.metrics if "loss" in r and r["step"] >= 300]
    assert {r["server"] for r in late} >= {0}, late[:5]  # training went on after the kill




def test_a_killed_ps_is_one_cause_first_error_and_a_rerun_resumes_from_the_backup(ps_cluster, tmp_path):
    old = dict(ps_cluster.server_pids)
    ps_pid = _pid_of(ps_cluster, "ps:0")
    cell = BACKED_UP.replace("EPOCHS", "30").replace("BACKUP", repr(str(tmp_path / "backup")))
    seen: list[str] = []
    killed = threading.Event()

    def on_event(event):
        if isinstance(event, WorkerOutput):
            seen.append(event.content.get("text", ""))
            # epochs 1-3 are backed up before the fourth begins (BackupAndRestore saves at epoch end)
            if "Epoch 4/" in seen[-1] and not killed.is_set():
                killed.set()
                os.kill(ps_pid, signal.SIGKILL)

    with pytest.raises(ParameterServerLost) as info:
        ps_cluster.run(cell, on_event=on_event, timeout=600)
    assert str(info.value).startswith("parameter server ps-0 died (killed by SIGKILL)"), str(info.value)
    assert info.value.restarted
    before = [float(v) for v in re.findall(r" - loss: ([0-9.]+)", "".join(seen))]
    assert len(before) >= 3, seen
    result = ps_cluster.run(cell, timeout=300)  # the same cell again: fresh tasks, fresh coordinator
    assert not set(ps_cluster.server_pids.values()) & set(old.values())
    epochs = [int(e) for e in re.search(r"^epochs (.*)$", result.stdout(0), re.M).group(1).split()]
    assert epochs == list(range(epochs[0], 30)) and epochs[0] >= 3, epochs  # resumed, not from epoch 0
    # The weights came back too, not only the epoch count: the resumed fit starts from exactly the
    # weights the lost run had after its last backed-up epoch. (Epoch losses cannot show it: under
    # asynchronous parameter-server training one epoch's loss varies more than a restore changes it.)
    lost_run = "".join(seen)
    saved = re.search(rf"^weights after epoch {epochs[0] - 1} (-?[0-9.]+)$", lost_run, re.M)
    assert saved, lost_run[-3000:]
    restored = float(re.search(r"^weights at start (-?[0-9.]+)$", result.stdout(0), re.M).group(1))
    assert restored == pytest.approx(float(saved.group(1)), abs=1e-4), (saved.group(0), restored)


def test_max_restarts_after_a_lost_ps_renews_every_task_and_the_cell_resumes_from_the_backup(ps_cluster, tmp_path):
    old = {i.task: i.pid for i in ps_cluster.status()}
    cell = BACKED_UP.replace("EPOCHS", "30").replace("BACKUP", repr(str(tmp_path / "backup")))
    killed = threading.Event()

    def on_event(event):
        if isinstance(event, WorkerOutput) and "Epoch 4/" in event.content.get("text", "") and not killed.is_set():
            killed.set()
            os.kill(old["ps:0"], signal.SIGKILL)

    result = ps_cluster.run(cell, on_event=on_event, timeout=600, max_restarts=1)
    assert killed.is_set() and result.attempts == 2, result.restarts
    assert result.restarts[0].cause.startswith("coordinator "), result.restarts  # the kernel, not "worker 0"
    epochs = [int(e) for e in re.search(r"^epochs (.*)$", result.stdout(0, attempt=2), re.M).group(1).split()]
    assert epochs == list(range(epochs[0], 30)) and epochs[0] >= 3, epochs  # resumed from the backup
    new = {i.task: i.pid for i in ps_cluster.status()}
    assert all(new[t] not in (None, old[t]) for t in old), (old, new)  # every task is new, the ps too


STOCK = ps_counter_cell(5, "stock")


def test_stock_tutorial_code_reruns_in_a_fresh_coordinator_and_nothing_is_left():
    """The second run's ParameterServerStrategy is refused in the old coordinator kernel; the cell
    then runs again, once, in a fresh one (the servers kept), and says so in one line."""
    with Cluster(workers=1, ps=1, cpu=True) as cluster:
        cluster.start()
        assert "stock 5.0" in cluster.run(STOCK, timeout=300).stdout(0)
        first = {i.pid for i in cluster.status() if i.runs_cell}
        servers = dict(cluster.server_pids)
        result = cluster.run(STOCK, timeout=300)
        assert "stock 5.0" in result.stdout(0)  # a fresh variable, every step once
        assert servers == cluster.server_pids  # the servers were kept
        assert not first & {i.pid for i in cluster.status() if i.runs_cell}  # a fresh coordinator
        with pytest.raises(Exception, match="can connect to its cluster only once"):
            cluster.run(STOCK + STOCK, timeout=300)  # two in one run: refused in the fresh kernel too
        pids = (first | {p for p in cluster.server_pids.values() if p}
                | {i.pid for i in cluster.status() if i.pid})
        assert len(pids) == 4
    deadline = time.monotonic() + 20  # generous: kills are asynchronous on a loaded machine
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}
        time.sleep(0.1)
    assert not alive, alive


def test_the_stock_fit_cell_runs_three_times_in_one_cluster_each_time_training_afresh():
    """TensorFlow's tutorial cell (resolver, ParameterServerStrategy, fit with steps_per_epoch) run
    three times in one ``--ps 1 --workers 2`` cluster, as a notebook user reruns a cell."""
    with Cluster(workers=2, ps=1, cpu=True) as cluster:
        cluster.start()
        servers = dict(cluster.server_pids)
        for run in range(3):
            _, notes = run_stock_fit(cluster, epochs=3)
            assert len(notes) == (0 if run == 0 else 1), (run, notes)
            if run:
                assert notes[0].startswith("[coordinator] mwnotebook: ") and "servers kept running" in notes[0]
        assert cluster.server_pids == servers
        assert all(i.alive for i in cluster.status())


def test_the_stock_fit_cell_rerun_in_mwtrain_says_what_happened_in_one_line(capsys):
    """The issue's reproduction, as a new user would: one %%mwtrain --ps 1 --workers 2 cell with
    TensorFlow's tutorial code, run twice in a (terminal-style) IPython shell."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "mwnotebook")
    try:
        for run in range(2):
            shell.run_cell_magic("mwtrain", "--ps 1 --workers 2 --cpu --no-dashboard",
                                 STOCK_PS_FIT.replace("EPOCHS", "2"))
            out = capsys.readouterr()
            assert "[coordinator] losses " in out.out, out
            notes = [line for line in (out.out + out.err).splitlines() if "second ParameterServerStrategy" in line]
            assert len(notes) == run, out
    finally:
        shell.run_line_magic("mwcluster", "stop")


CHIEF_CELL = r'''
import tensorflow as tf
import mwnotebook.worker as mw
strategy = mw.strategy()
with strategy.scope():
    v = tf.Variable(1.0)
total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
resolver = strategy.cluster_resolver
print("task", resolver.task_type, resolver.task_id, "chief", mw.is_chief(), "replicas",
      strategy.num_replicas_in_sync, int(total), "tutorial_is_chief",
      resolver.task_type == "worker" and resolver.task_id == 0)
'''


def test_chief_is_replica_zero_under_mwms():
    with Cluster(workers=2, chief=True, cpu=True) as cluster:
        result = cluster.run(CHIEF_CELL, timeout=300)
    lines = [result.stdout(i).strip().splitlines()[-1] for i in range(2)]
    assert lines[0] == "task chief 0 chief True replicas 2 2 tutorial_is_chief False", lines
    # the tutorial's own check picks the second replica: the silent misbehaviour mw.is_chief() avoids
    assert lines[1] == "task worker 0 chief False replicas 2 2 tutorial_is_chief True", lines


def test_ps_and_worker_ports_are_unreachable_from_another_host(peer_host):
    with Cluster(workers=1, ps=1, cpu=True, network="private") as cluster:
        cluster.start()
        assert cluster.network_isolated
        ports = [int(a.rsplit(":", 1)[1]) for a in cluster.addresses]
        # inside the namespace the servers listen (the coordinator checks worker-0 and ps-0)
        probe = ("import socket\n" + "".join(
            f"socket.create_connection(('127.0.0.1', {p}), timeout=5).close()\n" for p in ports[1:]) + "print('ok')")
        assert cluster.run(probe, timeout=60).stdout(0).strip() == "ok"
        for port in ports:
            assert not reachable_from_peer(peer_host, port), port




def test_the_evaluator_runs_beside_training_and_ends_after_the_last_checkpoint(tmp_path):
    with Cluster(workers=1, evaluator=True, cpu=True) as cluster:
        assert [c["task"]["type"] for c in cluster.tf_configs] == ["worker", "evaluator"]
        result = cluster.run(EVALUATOR_CELL.replace("CKPT_DIR", repr(str(tmp_path))), timeout=600)
    assert "trained ['worker']" in result.stdout(0)  # the evaluator is not in the training cluster
    assert "evaluator TF_CONFIG cluster ['evaluator']" in result.stdout(1)
    assert "evaluated the last checkpoint" in result.stdout(1)
    val = [m for m in result.metrics if "val_loss" in str(m)]
    assert val, result.metrics  # its metrics reach the chart's path as their own series
