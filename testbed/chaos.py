"""Chaos for ``--max-restarts``: training cells that resume from a backup, and a killer that
SIGKILLs workers at random moments while they train. Shared by tests/reliability/test_restarts_chaos.py
and benchmarks/faults.py chaos (which writes the side-by-side numbers).

The killer works from the events the cell sends (never from inside the cell): a kill is due when
the live metrics pass a step drawn at random, or right when a restart is announced ("during a
restart": fresh workers are up, the cell has not resumed training yet). Every kill is timed, and so
is the first batch each attempt trains (the record's own ``time``), which gives "kill -> training
again".
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from mwnotebook.shared.events import Event, RunRestarted, WorkerMetrics
from mwnotebook.shared.metrics import MetricsStore

#: A tf_keras ``fit`` with ``BackupAndRestore``: no shuffle, one pass over the data per epoch, so a
#: run resumed at an epoch boundary sees exactly the batches an uninterrupted one sees.
FIT_CELL = '''
import os
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(3)
x = rng.normal(size=({samples}, 8)).astype("float32")
y = (x[:, 0] - 0.5 * x[:, 1] > 0).astype("float32")[:, None]
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)
tf.keras.utils.set_random_seed(1)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"])

class EpochLines(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {{epoch + 1}} loss {{logs['loss']:.6f}} accuracy {{logs['accuracy']:.6f}}", flush=True)
{extra}
backup = tf.keras.callbacks.BackupAndRestore(backup_dir={backup!r})
history = model.fit(dataset, epochs={epochs}, verbose=0, callbacks=[backup, EpochLines(){callbacks}])
print(f"final loss {{history.history['loss'][-1]:.6f}} accuracy {{history.history['accuracy'][-1]:.6f}}", flush=True)
'''

#: The seed's custom training loop (tests/data/seed_train.py) made preemptible the way TensorFlow's
#: custom-loop tutorial does it: a ``CheckpointManager`` (chief: the real directory, others: a
#: scratch one they delete) saved after every epoch, restored at the top. One epoch is one pass over
#: each worker's shard (128 examples / 16 per batch = 8 steps), so the data iterator, which starts
#: again from the beginning after a restart, is at the same place an uninterrupted run would be.
LOOP_CELL = '''
import json, os, shutil
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw
tf_config = json.loads(os.environ["TF_CONFIG"])
task_index = tf_config["task"]["index"]
worker_count = len(tf_config["cluster"]["worker"])
global_batch_size = 16 * worker_count
steps_per_epoch = 8

def dataset_fn(input_context):
    rng = np.random.default_rng(7)
    features = rng.normal(size=(256, 8)).astype("float32")
    scores = features[:, 0] * 0.8 + features[:, 1] * 0.6 - features[:, 2] * 0.4 + features[:, 3] * 0.2
    labels = (scores > 0).astype("float32")[:, None]
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    return (tf.data.Dataset.from_tensor_slices((features, labels))
            .shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
            .shuffle(256, seed=7, reshuffle_each_iteration=False).repeat().batch(batch_size))

strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(7)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.03)
    loss_object = tf.keras.losses.BinaryCrossentropy(reduction=tf.keras.losses.Reduction.NONE)
    train_accuracy = tf.keras.metrics.BinaryAccuracy()
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")

checkpoint_dir = {backup!r}
write_dir = checkpoint_dir if task_index == 0 else os.path.join(checkpoint_dir, f"scratch-worker{{task_index}}")
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch)
manager = tf.train.CheckpointManager(checkpoint, directory=write_dir, max_to_keep=1)
latest = tf.train.latest_checkpoint(checkpoint_dir)
if latest:
    checkpoint.restore(latest)
    print(f"restored epoch {{int(epoch.numpy())}}", flush=True)
iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

@tf.function
def train_step(iterator):
    def replica_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, predictions), global_batch_size=global_batch_size)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        train_accuracy.update_state(labels, predictions)
        return loss
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(next(iterator),)), axis=None)

while int(epoch.numpy()) < {epochs}:
    train_accuracy.reset_state()
    total = 0.0
    for i in range(steps_per_epoch):
        loss = train_step(iterator)
        total += float(loss)
        mw.report(step=int(epoch.numpy()) * steps_per_epoch + i + 1, global_loss=loss)
{extra}
    epoch.assign_add(1)
    manager.save()
    if task_index != 0:
        shutil.rmtree(write_dir, ignore_errors=True)
    print(f"epoch {{int(epoch.numpy())}} loss {{total / steps_per_epoch:.6f}} "
          f"accuracy {{float(train_accuracy.result()):.6f}}", flush=True)
print(f"final loss {{total / steps_per_epoch:.6f}} accuracy {{float(train_accuracy.result()):.6f}}", flush=True)
'''


def fit_cell(backup: str, epochs: int = 8, samples: int = 2048, extra: str = "", callbacks: str = "") -> str:
    return FIT_CELL.format(backup=backup, epochs=epochs, samples=samples, extra=extra, callbacks=callbacks)


def loop_cell(backup: str, epochs: int = 8, extra: str = "") -> str:
    return LOOP_CELL.format(backup=backup, epochs=epochs, extra=extra)


def final_line(stdout: str) -> str:
    """The ``final loss ... accuracy ...`` line a cell printed last."""
    lines = [line for line in stdout.splitlines() if line.startswith("final loss")]
    return lines[-1] if lines else ""


@dataclass
class Kill:
    worker: int
    pid: int
    at: float  # time.time()
    when: str  # "training" | "restarting"
    attempt: int  # the attempt that was running (or being started)


@dataclass
class Killer:
    """An event sink that SIGKILLs workers: ``plan`` says, per kill, ``("step", n)`` (once the current
    attempt has reported a step >= its first step + n) or ``("restart", 0)`` (at the next restart).
    Kills alternate between the workers, starting at a random one."""

    cluster: Any
    plan: list[tuple[str, int]]
    rng: random.Random
    store: MetricsStore = field(default_factory=MetricsStore)
    kills: list[Kill] = field(default_factory=list)
    restarts: list[RunRestarted] = field(default_factory=list)
    first_batch_at: dict[int, float] = field(default_factory=dict)  # attempt -> time of its first batch
    _attempt_first_step: float | None = None
    _pending: bool = False

    def __post_init__(self) -> None:
        self._next_worker = self.rng.randrange(2)

    @property
    def attempt(self) -> int:
        return len(self.restarts) + 1

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunRestarted):
            self.restarts.append(event)
            self.store.add_restart(event.cause, time=event.lost_at, restart_seconds=event.restart_seconds)
            self._attempt_first_step = None
            self._pending = False
            if self._due("restart", 0):
                self._kill("restarting")
        elif isinstance(event, WorkerMetrics):
            self.store.add(event.worker, event.records)
            steps = [r["step"] for r in event.records if isinstance(r.get("step"), (int, float))]
            if not steps:
                return
            self.first_batch_at.setdefault(self.attempt, min(r["time"] for r in event.records))
            if self._attempt_first_step is None:
                self._attempt_first_step = min(steps)
            if self._due("step", max(steps) - self._attempt_first_step):
                self._kill("training")

    def _due(self, kind: str, progress: float) -> bool:
        if self._pending or len(self.kills) >= len(self.plan):
            return False
        want, at = self.plan[len(self.kills)]
        return want == kind and progress >= at

    def _kill(self, when: str) -> None:
        self._pending = True  # one kill per attempt: the next one waits for the restart
        worker = self._next_worker
        self._next_worker = 1 - worker
        attempt = self.attempt
        pid = next(info.pid for info in self.cluster.status() if info.index == worker)
        os.kill(pid, signal.SIGKILL)
        self.kills.append(Kill(worker, pid, time.time(), when, attempt))

    def kill_to_training(self) -> list[float]:
        """Per kill: seconds until the next attempt trained its first batch."""
        return [round(self.first_batch_at[k.attempt + 1] - k.at, 2) for k in self.kills
                if k.attempt + 1 in self.first_batch_at]


def random_plan(rng: random.Random, steps_per_epoch: int) -> list[tuple[str, int]]:
    """Three kills: mid-training after the first backup, during the restart it causes, mid-training
    of the attempt after that (steps drawn at random inside epochs 2-3 of each attempt)."""
    return [("step", rng.randrange(steps_per_epoch + 3, 3 * steps_per_epoch)), ("restart", 0),
            ("step", rng.randrange(steps_per_epoch + 3, 2 * steps_per_epoch))]

