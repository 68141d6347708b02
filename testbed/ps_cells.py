"""Cells that several test modules run on a ``ParameterServerStrategy`` cluster, written once, and
the run of the stock fit cell the local, SSH and Slurm tiers each repeat (:func:`run_stock_fit`)."""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mwnotebook.frontend.text.relay import TextRelay
from mwnotebook.shared.events import WorkerOutput

if TYPE_CHECKING:
    from mwnotebook import Cluster, RunResult


def ps_counter_cell(steps: int, label: str) -> str:
    """Stock tutorial code (the resolver from TF_CONFIG) that adds 1 to a variable on the parameter
    servers in ``steps`` scheduled steps and prints ``<label> <total>``: a run that ends with
    ``<label> <steps>.0`` had every step executed once."""
    return f'''
import tensorflow as tf
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    w = tf.Variable(0.0)
@tf.function
def step():
    w.assign_add(1.0)
for _ in range({steps}):
    coordinator.schedule(step)
coordinator.join()
print("{label}", float(w.numpy()), flush=True)
'''


#: The parameter-server tutorial's Keras path (DatasetCreator, ``steps_per_epoch``, tf_keras) through
#: ``mw.ps_strategy()``; ``EPOCHS`` is formatted in by the test (``PS_FIT.replace("EPOCHS", "3")``).
PS_FIT = r'''
import tensorflow as tf
import mwnotebook.worker as mw
strategy = mw.ps_strategy()
def dataset_fn(context):
    x = tf.random.stateless_uniform((256, 8), seed=(1, 2))
    y = tf.cast(tf.reduce_sum(x, axis=1, keepdims=True) > 4.0, tf.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(tf.keras.optimizers.SGD(0.5), loss="binary_crossentropy", steps_per_execution=5)
history = model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=EPOCHS,
                    steps_per_epoch=20, verbose=2)
print("losses", " ".join(f"{v:.4f}" for v in history.history["loss"]))
'''


#: :data:`PS_FIT` as TensorFlow's tutorial writes it: the cell makes its own strategy from the
#: resolver (no ``mw``), so each run builds a new ParameterServerStrategy in the coordinator kernel.
STOCK_PS_FIT = PS_FIT.replace(
    "import mwnotebook.worker as mw\nstrategy = mw.ps_strategy()\n",
    "resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()\n"
    "strategy = tf.distribute.ParameterServerStrategy(resolver)\n")
assert STOCK_PS_FIT != PS_FIT


#: The tutorial's custom loop: the coordinator schedules steps on per-worker datasets.
LOOP = r'''
import tensorflow as tf
import mwnotebook.worker as mw
strategy, coordinator = mw.ps_strategy(), mw.coordinator()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_metric = tf.keras.metrics.Mean()
def dataset_fn():
    x = tf.random.stateless_normal((128, 4), seed=(3, 4))
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
@tf.function
def per_worker_dataset_fn():
    return strategy.distribute_datasets_from_function(lambda _ctx: dataset_fn())
iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
@tf.function
def step(it):
    def replica_fn(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        loss_metric.update_state(loss)
        return loss
    x, y = next(it)
    return strategy.run(replica_fn, args=(x, y))
means = []
for epoch in range(4):
    loss_metric.reset_states()
    for _ in range(20):
        coordinator.schedule(step, args=(iterator,))
    coordinator.join()
    means.append(float(loss_metric.result()))
    mw.report(step=epoch, loss=means[-1])
print("loop", " ".join(f"{v:.4f}" for v in means))
'''


#: PS_FIT with the tutorial's BackupAndRestore: a rerun after a lost ps resumes from the last epoch backed up.
#: Prints a checksum of the model's weights when training begins (after BackupAndRestore, listed
#: first, restored them) and after every epoch (after the epoch's backup was written).
WEIGHTS_PROBE = r'''
class WeightsProbe(tf.keras.callbacks.Callback):
    def _sum(self):
        return sum(float(tf.reduce_sum(w)) for w in self.model.weights)
    def on_train_begin(self, logs=None):
        print(f"weights at start {self._sum():.6f}", flush=True)
    def on_epoch_end(self, epoch, logs=None):
        print(f"weights after epoch {epoch} {self._sum():.6f}", flush=True)
'''
BACKED_UP = PS_FIT.replace("history = model.fit", WEIGHTS_PROBE + "history = model.fit").replace(
    "verbose=2)", "verbose=2,\n                    callbacks=[tf.keras.callbacks.BackupAndRestore(BACKUP), WeightsProbe()])") + \
    'print("epochs", " ".join(str(e) for e in history.epoch))\n'


#: An evaluator beside training: it evaluates each checkpoint the workers write (CKPT_DIR is replaced by the test).
EVALUATOR_CELL = r'''
import os, tensorflow as tf
import mwnotebook.worker as mw
CKPT = CKPT_DIR
EPOCHS = 3
def data(n):
    x = tf.random.stateless_uniform((n, 8), seed=(1, 2))
    y = tf.cast(tf.reduce_sum(x, axis=1, keepdims=True) > 4.0, tf.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
def make_model():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(tf.keras.optimizers.SGD(0.5), loss="binary_crossentropy", metrics=["accuracy"])
    return model
if mw.task_type() == "evaluator":
    print("evaluator TF_CONFIG cluster", sorted(__import__("json").loads(os.environ["TF_CONFIG"])["cluster"]))
    mw.sidecar_evaluate(make_model(), data(64), CKPT, max_evaluations=EPOCHS)
    print("evaluated the last checkpoint")
else:
    strategy = mw.strategy()
    with strategy.scope():
        model = make_model()
    cb = tf.keras.callbacks.ModelCheckpoint(os.path.join(CKPT, "ckpt-{epoch}"), save_weights_only=True)
    model.fit(data(256).repeat(), epochs=EPOCHS, steps_per_epoch=8, callbacks=[cb], verbose=0)
    print("trained", sorted(__import__("json").loads(os.environ["TF_CONFIG"])["cluster"]))
'''


def assert_fit_trains(values: list[float], epochs: int) -> None:
    """:data:`PS_FIT`'s epoch losses show training: one per epoch, the last below the first, and some
    epoch at least 10% below the first. Not "the last 10% below": worker servers apply gradients of
    variables the other has moved since, so an epoch's mean jumps now and then (12 runs of 4 epochs on
    a local cluster: last/first 0.63-0.90, the 0.90 from one such jump in the last epoch)."""
    assert len(values) == epochs, values
    assert values[-1] < values[0] and min(values[1:]) < values[0] * 0.9, values


def losses(text: str, tag: str) -> list[float]:
    """The numbers of the line ``<tag> v1 v2 ...`` in ``text`` (a cell's printed losses)."""
    match = re.search(rf"^{tag} (.*)$", text, re.M)
    assert match, text[-2000:]
    return [float(v) for v in match.group(1).split()]


def run_stock_fit(cluster: Cluster, epochs: int) -> tuple[RunResult, list[str]]:
    """:data:`STOCK_PS_FIT` for ``epochs`` epochs in ``cluster``, its output through the notebook's text
    relay; checks the coordinator printed one loss per epoch, falling. Returns the run's result and
    the relayed stderr lines about a second ``ParameterServerStrategy`` (engine/cell/fresh_coordinator.py:
    none on a cluster's first strategy, one on each rerun)."""
    out, err = io.StringIO(), io.StringIO()
    relay = TextRelay(out, err, names=cluster.spec.layout.kernel_names())
    result = cluster.run(STOCK_PS_FIT.replace("EPOCHS", str(epochs)), on_event=relay, timeout=300)
    relay.flush()
    values = losses(result.stdout(0), "losses")
    assert len(values) == epochs and values[-1] < values[0], values
    return result, [line for line in err.getvalue().splitlines() if "second ParameterServerStrategy" in line]


def fit_with_a_server_killed_at_epoch_3(cluster: Cluster, epochs: int, kill: Callable[[], None],
                                        server: str, victim: int) -> list[float]:
    """:data:`PS_FIT` for ``epochs`` epochs with ``kill()`` called once the coordinator prints
    "Epoch 3/" (the steps are then in full flight); checks the fit completed, its loss falling, and
    waits (bounded) until ``server`` (``worker-1``) runs under a pid other than ``victim``. Returns
    the epoch losses."""
    killed = threading.Event()

    def on_event(event: object) -> None:
        if isinstance(event, WorkerOutput) and "Epoch 3/" in event.content.get("text", "") and not killed.is_set():
            kill()
            killed.set()

    result = cluster.run(PS_FIT.replace("EPOCHS", str(epochs)), on_event=on_event, timeout=600)
    assert killed.is_set()
    values = losses(result.stdout(0), "losses")
    assert len(values) == epochs and values[-1] < values[0], values
    deadline = time.monotonic() + 60  # a generous bound for the restart on a loaded machine
    while cluster.server_pids.get(server) in (None, victim) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.server_pids.get(server) not in (None, victim), cluster.server_pids
    return values
