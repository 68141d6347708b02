"""Scenarios 1-4 and 9b of benchmarks/reliability_table.md on one real two-worker TensorFlow cluster (Python API).

The scenarios share one cluster on purpose: each fault must leave it usable, and "recovered" means
exactly that -- the seed cell run right after the fault, on the same ``Cluster`` object, prints the
seed's published result lines. Faults come from the test (signals by pid from ``cluster.status()``)
or from the cell itself (a callback that raises, a worker that sleeps forever).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from mwnotebook import Cluster, ClusterTimeoutError, WorkerDiedError, WorkerError
from testbed.processes import MW_MODULES, alive_workers, kill_all, wait_gone
from tests._plugins.reliability_table import record

from .scenario import LONG_FIT, CellThread, seed_lines_ok, wait_for_file

pytestmark = [pytest.mark.reliability, pytest.mark.tf]


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(workers=2, cpu=True)
    c.start()
    yield c
    pids = {info.pid for info in c.status() if info.pid}
    c.stop()
    kill_all(wait_gone(pids, timeout=5, modules=MW_MODULES)[0])


def _pids(cluster: Cluster) -> set[int]:
    return {info.pid for info in cluster.status() if info.pid}


def _recover(cluster: Cluster, seed_code: str) -> tuple[bool, float]:
    """Run the seed cell on the same cluster: (printed the seed's lines, seconds it took)."""
    started = time.monotonic()
    try:
        result = cluster.run(seed_code, timeout=180)
    except Exception:  # not recovering is a result, asserted by the caller
        return False, time.monotonic() - started
    return seed_lines_ok([result.stdout(i) for i in range(2)]), time.monotonic() - started


def _orphans(old: set[int], cluster: Cluster) -> int:
    """Old worker processes still alive 5 s after the cell failed (the current ones excluded)."""
    left, _ = wait_gone(old - _pids(cluster), timeout=5)
    kill_all(left)
    return len(left)


def test_1_worker_raises_mid_fit(cluster, seed_code, tmp_path):
    stamp = tmp_path / "batch5"
    fault = ('        if index == 1 and batch == 5:\n'
             '            raise RuntimeError("worker 1 lost its data shard")')
    old = _pids(cluster)
    cell = CellThread(cluster, LONG_FIT.format(stamp=str(stamp), fault=fault), timeout=240)
    cell.join(240)
    # The stamp is the wall-clock time at which worker 1 was about to raise.
    raised_at = float((tmp_path / "batch5.1").read_text())
    failed_s = cell.ended_wall - raised_at
    detected_s = None if cell.first_failure_wall is None else cell.first_failure_wall - raised_at
    err = cell.error
    others_stopped = not alive_workers(old, MW_MODULES)
    orphans = _orphans(old, cluster)
    recovered, rec_s = _recover(cluster, seed_code)
    record("1 worker raises mid-fit", limit_s=10, detected_s=detected_s, failed_s=failed_s,
           recovered=recovered, orphans=orphans, note=f"next cell {rec_s:.1f} s")
    assert isinstance(err, WorkerError), repr(err)
    assert failed_s < 10, f"the cell failed {failed_s:.1f} s after worker 1 raised"  # a detection time the fault scenarios set (the reliability table's limit column): a hang bound
    assert err.failures[0].worker == 1 and "worker 1 lost its data shard" in err.evalue
    rendered = err._render_traceback_()
    assert "[worker 1]" in rendered[0] and "lost its data shard" in rendered[0]
    # Worker 1's own traceback comes right after its headline, before anything about worker 0.
    first_other = next((k for k, line in enumerate(rendered) if "[worker 0]" in line), len(rendered))
    assert any("on_train_batch_end" in line for line in rendered[1:first_other]), rendered
    assert err.restarted and others_stopped, "the other worker was not stopped"
    assert orphans == 0
    assert recovered


def test_2_kill_9_mid_training(cluster, seed_code, tmp_path):
    stamp = tmp_path / "batch5"
    old = _pids(cluster)
    victim = cluster.status()[1].pid
    cell = CellThread(cluster, LONG_FIT.format(stamp=str(stamp), fault=""), timeout=240)
    wait_for_file(tmp_path / "batch5.1", 180, while_running=cell)
    wait_for_file(tmp_path / "batch5.0", 10, while_running=cell)
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    cell.join(120)
    detected_s, failed_s = cell.since(t0)
    err = cell.error
    orphans = _orphans(old, cluster)
    restarted = not (old & _pids(cluster))
    recovered, rec_s = _recover(cluster, seed_code)
    record("2 kill -9 of a worker mid-fit", limit_s=5, detected_s=detected_s, failed_s=failed_s,
           recovered=recovered, orphans=orphans, note=f"next cell {rec_s:.1f} s")
    assert isinstance(err, WorkerDiedError), repr(err)
    assert failed_s < 5, f"the cell failed {failed_s:.1f} s after kill -9"  # a detection time the fault scenarios set (the reliability table's limit column): a hang bound
    first = err.failures[0]
    assert first.worker == 1 and first.kind == "died" and "SIGKILL" in first.exit_description
    assert "worker 1" in str(err) and "SIGKILL" in str(err)
    assert err.restarted and restarted
    assert orphans == 0
    assert recovered


def test_3_sigstop_of_a_worker(cluster, seed_code, tmp_path):
    stamp = tmp_path / "batch5"
    old = _pids(cluster)
    victim = cluster.status()[1].pid
    cell = CellThread(cluster, LONG_FIT.format(stamp=str(stamp), fault=""), timeout=240)
    try:
        wait_for_file(tmp_path / "batch5.1", 180, while_running=cell)
        wait_for_file(tmp_path / "batch5.0", 10, while_running=cell)
        t0 = time.monotonic()
        os.kill(victim, signal.SIGSTOP)
        cell.join(120)
    finally:
        if victim in alive_workers({victim}, MW_MODULES):  # never leave a stopped process behind
            os.kill(victim, signal.SIGCONT)
    detected_s, failed_s = cell.since(t0)
    err = cell.error
    orphans = _orphans(old, cluster)
    recovered, rec_s = _recover(cluster, seed_code)
    named = ", ".join(f"w{f.worker}:{f.kind}" + (f"/{f.ename}" if f.ename else "")
                      for f in getattr(err, "failures", []))
    record("3 SIGSTOP of a worker", limit_s=20, detected_s=detected_s, failed_s=failed_s,
           recovered=recovered, orphans=orphans, note=f"{type(err).__name__} [{named}]; next cell {rec_s:.1f} s")
    assert err is not None and failed_s is not None
    assert failed_s < 20, f"the cell failed {failed_s:.1f} s after SIGSTOP"  # a detection time the fault scenarios set (the reliability table's limit column): a hang bound
    assert "worker 1" in str(err)  # the frozen worker is named (today after worker 0's UnavailableError)
    assert victim not in alive_workers({victim}, MW_MODULES), "the stopped worker was not replaced"
    assert orphans == 0
    assert recovered


def test_4_python_hang_with_timeout(cluster, seed_code):
    cluster.run("import tensorflow as tf", timeout=120)  # fresh workers: the import is not the hang
    old = _pids(cluster)
    code = ("import os, time\nimport tensorflow as tf\n"
            "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
            "if os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n"
            "    time.sleep(10**6)  # hangs in plain Python\n"
            "total = strategy.reduce('SUM', strategy.run(lambda: tf.constant(1.0)), axis=None)\n")
    cell = CellThread(cluster, code, timeout=5)
    cell.join(60)
    detected_s, failed_s = cell.since(cell.started_at)
    err = cell.error
    orphans = _orphans(old, cluster)
    recovered, rec_s = _recover(cluster, seed_code)
    record("4 worker 1 hangs in Python, timeout=5", limit_s=10, detected_s=detected_s, failed_s=failed_s,
           recovered=recovered, orphans=orphans, note=f"counted from cell start; next cell {rec_s:.1f} s")
    assert isinstance(err, ClusterTimeoutError), repr(err)
    assert failed_s < 10, f"the cell failed {failed_s:.1f} s after it started (timeout 5 s)"  # a detection time the fault scenarios set (the reliability table's limit column): a hang bound
    assert any(f.worker == 1 and f.kind == "timeout" for f in err.failures), err.failures
    assert orphans == 0
    assert recovered


def test_9b_tf_op_before_the_strategy(cluster, seed_code):
    cluster.restart()  # fresh processes: TensorFlow fixes collectives at the first op
    old = _pids(cluster)
    code = ("import tensorflow as tf\nx = tf.constant([1.0, 2.0]) * 2\n"
            "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n")
    cell = CellThread(cluster, code, timeout=120)
    cell.join(150)
    detected_s, failed_s = cell.since(cell.started_at)
    err = cell.error
    replaced = not (old & _pids(cluster))
    orphans = _orphans(old, cluster)
    recovered, rec_s = _recover(cluster, seed_code)
    record("9b TF op before the strategy", detected_s=detected_s, failed_s=failed_s, recovered=recovered,
           orphans=orphans, note=f"counted from cell start; next cell {rec_s:.1f} s")
    assert isinstance(err, WorkerError), repr(err)
    text = str(err) + "\n".join(err._render_traceback_())
    assert "Collective ops must be configured at program startup" in text  # the raw TF error is kept
    assert "Create the strategy first" in text  # and what to do about it
    assert err.restarted and replaced, "the workers must be restarted to recover"
    assert "restarted" in text
    assert orphans == 0
    assert recovered
