"""What Keras shows on two real MultiWorkerMirroredStrategy workers: the global value of each metric.

tf_keras hands callbacks (the ``verbose=1`` progress bar, user callbacks) and ``train_on_batch``'s
caller N times each metric's true value per batch under a multi-worker strategy; the worker's hook
(mwnotebook/processes/runtime/keras_global_logs.py) makes them the global value. The ground
truth here is computed beside the logs and independently of the hook: each metric's ``result()``
read in cross-replica context (an all-reduce over both workers, as Keras does for ``History``).

One cell on the shared two-worker cluster covers: mean metrics (loss with an L2 regulariser,
accuracy), a ratio (precision), a sum (a custom ``Metric``), per-worker batches of different sizes
(16 and 8, so a mean of the workers' means would be wrong), validation batches, ``train_on_batch``,
``steps_per_execution=2``, and the switch: off gives Keras' own (summed) logs, on again gives the
global values on the same model. Every test runs on forked and on exec'd (``--no-template``) workers.
"""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.tf

CELL = r'''
import json
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw

strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(5)
rng = np.random.default_rng(1)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, :1] + 0.3 * x[:, 1:2] > 0).astype("float32")
PER_WORKER_BATCH = [16, 8]  # uneven on purpose

def shard(ctx, data, batch):
    return data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(batch)

train = strategy.distribute_datasets_from_function(
    lambda ctx: shard(ctx, tf.data.Dataset.from_tensor_slices((x, y)).repeat(), PER_WORKER_BATCH[ctx.input_pipeline_id]))
val = strategy.distribute_datasets_from_function(
    lambda ctx: shard(ctx, tf.data.Dataset.from_tensor_slices((x[:128], y[:128])), 16))

class Seen(tf.keras.metrics.Metric):
    """A sum, not a mean: examples seen so far."""
    def __init__(self, name="seen", **kwargs):
        super().__init__(name=name, **kwargs)
        self.n = self.add_weight(name="n", initializer="zeros")
    def update_state(self, y_true, y_pred, sample_weight=None):
        self.n.assign_add(tf.cast(tf.shape(y_true)[0], tf.float32))
    def result(self):
        return tf.identity(self.n)

def build(steps_per_execution):
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Input(shape=(8,)),
            tf.keras.layers.Dense(8, activation="relu", kernel_regularizer=tf.keras.regularizers.l2(0.01)),
            tf.keras.layers.Dense(1, activation="sigmoid")])
        model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="binary_crossentropy",
                      metrics=["accuracy", tf.keras.metrics.Precision(name="prec"), Seen()],
                      steps_per_execution=steps_per_execution)
    return model

def truth(model):
    return {m.name: float(m.result()) for m in model.metrics}

class Truth(tf.keras.callbacks.Callback):
    """Prints the logs this callback is given beside the all-reduced truth."""
    def __init__(self, tag):
        super().__init__()
        self.tag = tag
    def _print(self, kind, batch, logs):
        line = {"tag": self.tag, "kind": kind, "batch": batch, "truth": truth(self.model),
                "logs": {k: float(v) for k, v in logs.items()}}
        print("\nTRUTH " + json.dumps(line))
    def on_train_batch_end(self, batch, logs=None):
        self._print("train", batch, logs)
    def on_test_batch_end(self, batch, logs=None):
        self._print("test", batch, logs)

model = build(1)
history = model.fit(train, epochs=2, steps_per_epoch=4, validation_data=val, validation_steps=2,
                    verbose=1, callbacks=[Truth("bar")])
print("\nHISTORY " + json.dumps(history.history))
print("MODEL " + type(model).__module__)
returned = model.train_on_batch(x[:32], y[:32], reset_metrics=False, return_dict=True)
print("\nTRUTH " + json.dumps({"tag": "train_on_batch", "kind": "return", "batch": 0, "truth": truth(model),
                               "logs": {k: float(v) for k, v in returned.items()}}))

mw.auto_keras_callback(False)
model.fit(train, initial_epoch=10, epochs=11, steps_per_epoch=2, verbose=0,
          callbacks=[Truth("off"), mw.keras_callback()])
mw.auto_keras_callback(True)
model.fit(train, initial_epoch=20, epochs=21, steps_per_epoch=2, verbose=0, callbacks=[Truth("on")])

build(2).fit(train, epochs=1, steps_per_epoch=4, verbose=0, callbacks=[Truth("steps_per_execution=2")])
'''

BAR = re.compile(r"^\s*(\d+)/(\d+) \[[=>.]*\] - (ETA: \S+|\d+m?s \S+/step) - (.*)$")
VALUE = re.compile(r"(\w+): (\S+)")


def _truth_lines(stdout: str) -> list[dict]:
    return [json.loads(line[len("TRUTH "):]) for line in stdout.splitlines() if line.startswith("TRUTH ")]


def _bars(stdout: str) -> list[tuple[int, bool, dict[str, float]]]:
    """Every progress-bar state printed: (batches done, final line of the epoch?, values shown)."""
    bars = []
    for segment in re.split(r"[\r\n\b]+", stdout):
        # A TensorFlow log line can land in the middle of a bar's line: on a loaded machine Keras
        # warns that a callback is slow, and in an exec'd worker TensorFlow's Python logger writes
        # to stdout (it picks stdout when it is imported in an interactive shell).
        segment = segment.split("TRUTH ")[0].split("WARNING:tensorflow:")[0]
        match = BAR.match(segment)
        if match:
            values = {k: float(v) for k, v in VALUE.findall(match.group(4))}
            bars.append((int(match.group(1)), match.group(3).endswith("/step"), values))
    return bars


def _close(shown: dict[str, float], true: dict[str, float], digits: float = 6e-5) -> bool:
    """The bar prints 4 decimals."""
    return all(abs(shown[k] - true[k]) <= digits + 1e-6 * abs(true[k]) for k in true)


@pytest.fixture(scope="module", params=["forked", "exec"])
def keras_run(request: pytest.FixtureRequest):
    """The cell on forked workers (the hook applied to the template's preloaded tf_keras) and on
    exec'd ones (applied when the cell first imports it): every test below runs on both."""
    cluster = request.getfixturevalue("tf_cluster" if request.param == "forked" else "exec_cluster")
    return cluster.run(CELL, timeout=300)


@pytest.mark.slow
def test_progress_bar_shows_the_global_values_on_two_workers(keras_run, no_orphans):
    for w in range(2):
        stdout = keras_run.stdout(w)
        assert "MODEL tf_keras." in stdout, "this test is about tf_keras under MWMS"
        train = [t for t in _truth_lines(stdout) if t["tag"] == "bar" and t["kind"] == "train"]
        assert len(train) == 8
        history = json.loads(next(line for line in stdout.splitlines() if line.startswith("HISTORY "))[8:])
        epochs = re.split(r"Epoch \d+/2", stdout)[1:]
        assert len(epochs) == 2
        live = 0
        for epoch, text in enumerate(epochs):
            bars = _bars(text)
            assert bars and bars[-1][1], f"worker {w} epoch {epoch}: no final bar line in {text!r}"
            for done, final, shown in bars:
                if final:  # the epoch's last line shows History's values (Keras gets those right)
                    true = {k: v[epoch] for k, v in history.items()}
                else:  # a live state after `done` batches: the all-reduced truth at that batch
                    true = train[epoch * 4 + done - 1]["truth"]
                    live += 1
                assert _close(shown, true), f"worker {w} epoch {epoch} batch {done}: bar {shown}, true {true}"
        assert live >= 2  # the bar is throttled (0.05 s), but live states are printed


def test_every_callback_and_train_on_batch_get_the_global_values(keras_run):
    for w in range(2):
        lines = _truth_lines(keras_run.stdout(w))
        for tag in ("bar", "train_on_batch", "on", "steps_per_execution=2"):
            tagged = [t for t in lines if t["tag"] == tag]
            assert tagged, tag
            for t in tagged:
                for name, true in t["truth"].items():
                    assert t["logs"][name] == pytest.approx(true, rel=1e-5), (tag, t)
        # the sum metric counts the examples of both workers (16 + 8 per step), once
        seen = [t["logs"]["seen"] for t in lines if t["tag"] == "steps_per_execution=2"]
        assert seen == [48.0, 96.0]  # logs every 2 steps


def test_switch_off_gives_keras_own_logs_and_the_explicit_callback_corrects_them(keras_run):
    lines = _truth_lines(keras_run.stdout(0))
    off = [t for t in lines if t["tag"] == "off"]
    assert len(off) == 2
    for t in off:  # Keras' own batch logs: twice the truth, for every kind of metric
        for name, true in t["truth"].items():
            assert t["logs"][name] == pytest.approx(2 * true, rel=1e-5), t
    records = [r for r in keras_run.metrics if r.get("kind") == "batch" and r.get("epoch") == 10]
    assert sorted(r["worker"] for r in records) == [0, 0, 1, 1]
    for r in records:
        true = off[r["batch"]]["truth"]  # step counts on from earlier epochs; batch is 0-based in the epoch
        assert r["global_loss"] == pytest.approx(true["loss"], rel=1e-5)
        assert r["global_prec"] == pytest.approx(true["prec"], rel=1e-5)
