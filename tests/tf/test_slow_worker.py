"""The slow worker named, on two real MultiWorkerMirroredStrategy workers running tf_keras ``fit``
(mwnotebook/processes/runtime/step_stamps.py stamps the step, the automatic callback sends the split,
mwnotebook/shared/step_times.py decides): a fit whose worker 1 sleeps 60 ms per batch in its input
pipeline names worker 1, input-bound, and only it; the same fit without the sleep names nobody; a
custom loop with ``strategy.run`` and ``mw.report`` whose worker 1 sleeps before each step names
worker 1 ("slower before the collective": no input figure there). One shared cluster
(tests/tf/conftest.py ``tf_cluster``), and one ``mwnotebook run`` of the slow fit (its own two
workers) whose stderr carries the line; ~45 s on 2 loaded cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mwnotebook.shared.events import Event, WorkerMetrics
from mwnotebook.shared.step_times import OWN_KEY, from_records, slow_worker_line

pytestmark = pytest.mark.tf

CELL = r'''
import time
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw

SLEEP = SLEEP_S if mw.task_index() == 1 else 0.0
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")

def slow(a, b):
    def nap(t):
        time.sleep(SLEEP)
        return t
    return tf.py_function(nap, [a], tf.float32), b

data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16).map(slow)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(data, epochs=1, steps_per_epoch=30, verbose=0)
'''


LOOP = r'''
import time
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw

SLEEP = SLEEP_S if mw.task_index() == 1 else 0.0
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(16, 8)).astype("float32")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)

@tf.function
def train_step(batch):
    def step_fn(b):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(b)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return strategy.run(step_fn, args=(batch,))

for i in range(30):
    time.sleep(SLEEP)  # this worker's "input"
    mw.report(step=i, loss=train_step(tf.constant(x)))
'''


def _fit(cluster: Any, sleep: float, cell: str = CELL) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []

    def on_event(event: Event) -> None:
        if isinstance(event, WorkerMetrics):
            records.extend(dict(r, worker=event.worker) for r in event.records)

    result = cluster.run(cell.replace("SLEEP_S", repr(sleep)), on_event=on_event, timeout=300)
    assert result.ok, result
    return records


def test_a_fit_whose_worker_1_waits_for_input_names_worker_1(tf_cluster: Any) -> None:
    records = _fit(tf_cluster, 0.06)
    assert sum(1 for r in records if OWN_KEY in r) >= 50  # both workers sent their split per step
    line = slow_worker_line(records)
    assert line is not None and line.startswith("mwnotebook: worker 1 is the slow worker, input-bound"), line
    split = from_records(records).workers()
    assert split[1].own > 0.04 and split[0].wait > 0.03  # worker 0 waits for it in the collective


def test_an_even_fit_names_nobody(tf_cluster: Any) -> None:
    records = _fit(tf_cluster, 0.0)
    assert len(from_records(records).workers()) == 2  # measured on both, and even
    assert slow_worker_line(records) is None


def test_a_custom_loop_whose_worker_1_is_slow_names_worker_1(tf_cluster: Any) -> None:
    line = slow_worker_line(_fit(tf_cluster, 0.06, LOOP))
    assert line is not None and line.startswith(
        "mwnotebook: worker 1 is the slow worker, slower before the collective"), line


def test_mwnotebook_run_prints_the_line(tmp_path: Path) -> None:
    script = tmp_path / "slow_fit.py"
    script.write_text(CELL.replace("SLEEP_S", "0.06"))
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    done = subprocess.run([sys.executable, "-m", "mwnotebook.frontend.cli.command", "run", "--workers", "2",
                           "--cpu", "--no-report", str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "is the slow worker" in line]
    assert len(lines) == 1 and lines[0].startswith("mwnotebook: worker 1 is the slow worker, input-bound"), \
        done.stderr[-3000:]
