"""A hung cell explains itself.

Worker 1 sleeps before the collective; worker 0 blocks in the all-reduce waiting for it. While the
cell hangs, ``Cluster.stacks()`` shows worker 0's main thread inside TensorFlow's collective code
and worker 1's main thread at the cell's ``time.sleep`` line; the timeout error carries the same.
"""

from __future__ import annotations

import threading
import time

import pytest

from mwnotebook import Cluster
from mwnotebook.errors import ClusterTimeoutError
from tests._plugins.reliability_table import record

pytestmark = [pytest.mark.reliability, pytest.mark.tf]

#: Seconds until the hung cell times out (and its error gets the stacks of that moment).
HANG_TIMEOUT_S = 15

HUNG = '''import os, time
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
if os.environ["MWNOTEBOOK_WORKER_INDEX"] == "1":
    time.sleep(600)
total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
'''


def _explains_the_hang(report) -> bool:
    w0, w1 = report.workers
    return (w0.collective_frame is not None and w1.main is not None and w1.collective_frame is None
            and any("time.sleep(600)" in f for f in w1.main.frames))


def test_stacks_of_a_hung_cell(no_orphans):
    with Cluster(workers=2, cpu=True) as cluster:
        cluster.start()
        errors: list[BaseException] = []
        runner = threading.Thread(target=lambda: _run(cluster, errors), daemon=True)
        runner.start()
        deadline, report, t0 = time.monotonic() + 90, None, time.monotonic()
        while time.monotonic() < deadline and runner.is_alive():
            time.sleep(1.0)
            report = cluster.stacks()
            if _explains_the_hang(report):
                break
        seen_s = time.monotonic() - t0
        runner.join(120)
        assert report is not None and _explains_the_hang(report), report and report.text()
        assert len(errors) == 1 and isinstance(errors[0], ClusterTimeoutError), errors
        attached = errors[0].stacks
        record("12.2 stacks of a hung collective", note=f"explained after {seen_s:.1f} s; on timeout: "
               f"{_explains_the_hang(attached)}", ok=_explains_the_hang(attached))
        assert _explains_the_hang(attached), attached.text()
        assert "Worker stacks at that moment" in str(errors[0])
        print(report.text())


def _run(cluster: Cluster, errors: list[BaseException]) -> None:
    try:
        # The timeout only has to outlast the moment the stacks explain the hang (both workers past
        # building the strategy: a few seconds on forked workers), so the test does not wait out more.
        cluster.run(HUNG, timeout=HANG_TIMEOUT_S)
    except BaseException as exc:
        errors.append(exc)
