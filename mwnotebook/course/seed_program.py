"""The seed: TensorFlow's two-worker training program, written once for every lesson.

It is the training program of the how-to *How to run multi-worker training in TensorFlow*
(``multiworker_train.py``, kept verbatim as a script in tests/data/seed_train.py), cut into four
functions with the same operations in the same order, so that it prints the same line on each
worker (``worker=0 replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281``).
In a ``%%mwtrain`` cell::

    from mwnotebook.course import seed_program
    seed_program.main()

:func:`main` reads the worker's ``TF_CONFIG`` (:func:`read_task`), makes the
``MultiWorkerMirroredStrategy``, builds the model inside its scope (:func:`build_model`), shards one
deterministic dataset across the workers (:func:`make_dataset`), trains three epochs of four steps
(:func:`train`), and prints the result line only if both workers joined, the loss fell and the
accuracy is above 0.75. TensorFlow is imported inside the functions: importing this module (or
mwnotebook) does not load it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mwnotebook.errors import ConfigError

__all__ = ["EPOCHS", "PER_WORKER_BATCH_SIZE", "STEPS_PER_EPOCH", "SeedModel", "SeedResult", "Task",
           "build_model", "main", "make_dataset", "read_task", "train"]

#: the tutorial's numbers: 16 examples per worker and step, three epochs of four steps
PER_WORKER_BATCH_SIZE = 16
STEPS_PER_EPOCH = 4
EPOCHS = 3
#: one seed for the data, its shuffle and the model's initial weights
SEED = 7


@dataclass(frozen=True)
class Task:
    """This worker's place in the cluster, as its ``TF_CONFIG`` says."""

    index: int
    worker_count: int


@dataclass(frozen=True)
class SeedModel:
    """What :func:`build_model` makes inside ``strategy.scope()``: all of it mirrored on every worker."""

    model: Any
    optimizer: Any
    loss_object: Any
    accuracy: Any


@dataclass(frozen=True)
class SeedResult:
    """One worker's outcome; :meth:`line` is what the worker prints."""

    worker: int
    replicas: int
    global_batch_size: int
    initial_loss: float
    final_loss: float
    final_accuracy: float

    def line(self) -> str:
        return (f"worker={self.worker} replicas={self.replicas} initial_loss={self.initial_loss:.4f} "
                f"final_loss={self.final_loss:.4f} final_accuracy={self.final_accuracy:.4f}")


def read_task(environ: Mapping[str, str] | None = None) -> Task:
    """The worker's index and the number of workers, from ``TF_CONFIG`` (``%%mwtrain`` sets it per worker)."""
    raw = (os.environ if environ is None else environ).get("TF_CONFIG")
    if not raw:
        raise ConfigError("TF_CONFIG is not set: run the seed program in a %%mwtrain cell, "
                          "which gives each worker its own TF_CONFIG")
    tf_config = json.loads(raw)
    return Task(int(tf_config["task"]["index"]), len(tf_config["cluster"]["worker"]))


def make_dataset(input_context: Any, global_batch_size: int) -> Any:
    """The tutorial's ``dataset_fn``: 256 examples of 8 features whose label is the sign of a linear
    score, this worker's shard of them (``InputContext`` gives its pipeline index), shuffled once,
    repeated, in batches of the per-replica size."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(SEED)
    features = rng.normal(size=(256, 8)).astype("float32")
    scores = features[:, 0] * 0.8 + features[:, 1] * 0.6 - features[:, 2] * 0.4 + features[:, 3] * 0.2
    labels = (scores > 0).astype("float32")[:, None]
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    return (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        .shuffle(256, seed=SEED, reshuffle_each_iteration=False)
        .repeat()
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )


def build_model(learning_rate: float = 0.03) -> SeedModel:
    """A small classifier (8 -> 16 relu -> 1 sigmoid), Adam, a per-example loss and an accuracy
    metric. Call it inside ``strategy.scope()``: the variables are then mirrored on every worker."""
    import tensorflow as tf

    model = tf.keras.Sequential([
        tf.keras.layers.Input(shape=(8,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(1, activation="sigmoid"),
    ])
    optimizer = tf.keras.optimizers.Adam(learning_rate=learning_rate)
    # NONE: one loss per example; compute_average_loss divides by the global batch, not the local one
    loss_object = tf.keras.losses.BinaryCrossentropy(reduction=tf.keras.losses.Reduction.NONE)
    return SeedModel(model, optimizer, loss_object, tf.keras.metrics.BinaryAccuracy())


def train(strategy: Any, seed_model: SeedModel, iterator: Any, global_batch_size: int, *,
          epochs: int = EPOCHS, steps_per_epoch: int = STEPS_PER_EPOCH) -> tuple[float, float]:
    """The custom loop: per step, ``strategy.run`` computes each replica's gradients and applies
    them (all-reduced across the workers), ``strategy.reduce`` sums the replicas' losses into the
    global loss. Returns the mean global loss of the first epoch and of the last."""
    import tensorflow as tf

    model, optimizer = seed_model.model, seed_model.optimizer

    def step(iterator: Any) -> Any:
        def replica_step(inputs: Any) -> Any:
            batch_features, batch_labels = inputs
            with tf.GradientTape() as tape:
                predictions = model(batch_features, training=True)
                per_example_loss = seed_model.loss_object(batch_labels, predictions)
                loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            seed_model.accuracy.update_state(batch_labels, predictions)
            return loss

        per_replica_losses = strategy.run(replica_step, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    train_step = tf.function(step)  # one graph for the step, traced at its first call

    initial_loss = final_loss = None
    for _ in range(epochs):
        seed_model.accuracy.reset_state()
        total_loss = 0.0
        for _ in range(steps_per_epoch):
            total_loss += train_step(iterator)
        final_loss = total_loss / steps_per_epoch
        if initial_loss is None:
            initial_loss = tf.identity(final_loss)
    return float(initial_loss), float(final_loss)  # type: ignore[arg-type]


def main(*, per_worker_batch_size: int = PER_WORKER_BATCH_SIZE, learning_rate: float = 0.03,
         epochs: int = EPOCHS, steps_per_epoch: int = STEPS_PER_EPOCH) -> SeedResult:
    """The whole program on this worker: train, check, print the result line, return it."""
    os.environ["CUDA_VISIBLE_DEVICES"] = "-1"  # CPU only (as --cpu), before TensorFlow is loaded
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf

    task = read_task()
    global_batch_size = per_worker_batch_size * task.worker_count

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    tf.keras.utils.set_random_seed(SEED)
    with strategy.scope():
        seed_model = build_model(learning_rate)
    dataset = strategy.distribute_datasets_from_function(
        lambda input_context: make_dataset(input_context, global_batch_size))
    initial_loss, final_loss = train(strategy, seed_model, iter(dataset), global_batch_size,
                                     epochs=epochs, steps_per_epoch=steps_per_epoch)

    # no result line unless every worker joined, the loss fell and the model learned
    tf.debugging.assert_equal(strategy.num_replicas_in_sync, task.worker_count)
    tf.debugging.assert_less(final_loss, initial_loss)
    tf.debugging.assert_greater(seed_model.accuracy.result(), 0.75)
    result = SeedResult(task.index, int(strategy.num_replicas_in_sync), global_batch_size, initial_loss,
                        final_loss, float(seed_model.accuracy.result()))
    print(result.line(), flush=True)
    return result
