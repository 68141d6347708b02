"""TensorFlow's Python log records reach the notebook on the worker's stderr, labelled by worker,
and never inside the progress bar's stdout line (mwnotebook/processes/runtime/tf_logs.py), on forked
and on exec'd workers.

The record is a real one: a stock tf_keras ``fit(verbose=1)`` whose ``on_train_batch_end`` sleeps
0.3 s, so tf_keras logs "Callback method `on_train_batch_end` is slow compared to the batch time"
after its first five batches (tf_keras/src/callbacks.py; a batch of this model takes milliseconds).
Before the fix an exec'd worker wrote it into the middle of a progress line on stdout. A forked
worker wrote it to the template's file descriptor 2: in a notebook ipykernel's capture of that
descriptor relayed it as stderr (another thread and a pipe, not in order with the cell's output),
but under pytest it never reached the notebook at all, because ipykernel captures no descriptors
when ``PYTEST_CURRENT_TEST`` is in the environment (ipykernel/iostream.py) and the workers inherit it.
"""

from __future__ import annotations

import io

import pytest

from mwnotebook.frontend.text.relay import TextRelay

pytestmark = pytest.mark.tf

STEPS = 8
SLOW_FIT = f'''
import time
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=({STEPS * 16}, 4)).astype("float32")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")

class Slow(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.3)

model.fit(tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(16), epochs=1, verbose=1, callbacks=[Slow()])
'''
SLOW = "WARNING:tensorflow:Callback method `on_train_batch_end` is slow compared to the batch time"


def test_tensorflow_log_records_go_to_the_workers_stderr_not_into_the_progress_line(any_cluster):
    out, err = io.StringIO(), io.StringIO()
    relay = TextRelay(out, err)
    result = any_cluster.run(SLOW_FIT, on_event=relay, timeout=300)
    relay.flush()
    for w in range(2):
        stdout, stderr = result.stdout(w), result.stderr(w)
        assert f"{STEPS}/{STEPS} [" in stdout, stdout[-500:]  # the progress bar ran to its end, on stdout
        assert "WARNING" not in stdout and "is slow compared" not in stdout, stdout
        assert SLOW in stderr, stderr
    # What a terminal shows: the record on stderr, labelled with its worker like other stderr.
    labelled = [line for line in err.getvalue().splitlines() if SLOW in line]
    assert sorted(line[:10] for line in labelled) == ["[worker 0]", "[worker 1]"], labelled
    assert all(line.startswith(("[worker 0] " + SLOW, "[worker 1] " + SLOW)) for line in labelled)
    assert SLOW not in out.getvalue() and "WARNING:tensorflow" not in out.getvalue()


def test_tensorflow_logs_at_a_scripts_level_and_a_cell_can_lower_it(any_cluster):
    """INFO records are hidden (a script's level); after ``setLevel("INFO")`` they show, on stderr."""
    cell = ('import tensorflow as tf\ntf.get_logger().info("hidden info")\ntf.get_logger().setLevel("INFO")\n'
            'tf.get_logger().info("shown info")\ntf.get_logger().setLevel("WARNING")\n')
    result = any_cluster.run(cell, timeout=120)
    for w in range(2):
        assert "hidden info" not in result.stderr(w) + result.stdout(w)
        assert "INFO:tensorflow:shown info" in result.stderr(w) and "shown info" not in result.stdout(w)
