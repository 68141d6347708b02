# The training program of the seed tutorial (its multiworker_train.py, steps 3-7), verbatim. Reads TF_CONFIG.
import json
import os

os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

import numpy as np
import tensorflow as tf

tf_config = json.loads(os.environ["TF_CONFIG"])
task_index = tf_config["task"]["index"]
worker_count = len(tf_config["cluster"]["worker"])
per_worker_batch_size = 16
global_batch_size = per_worker_batch_size * worker_count
steps_per_epoch = 4

def dataset_fn(input_context):
    rng = np.random.default_rng(7)
    features = rng.normal(size=(256, 8)).astype("float32")
    scores = (
        features[:, 0] * 0.8
        + features[:, 1] * 0.6
        - features[:, 2] * 0.4
        + features[:, 3] * 0.2
    )
    labels = (scores > 0).astype("float32")[:, None]
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    return (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .shard(
            input_context.num_input_pipelines,
            input_context.input_pipeline_id,
        )
        .shuffle(256, seed=7, reshuffle_each_iteration=False)
        .repeat()
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )

strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(7)

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(8,)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.03)
    loss_object = tf.keras.losses.BinaryCrossentropy(
        reduction=tf.keras.losses.Reduction.NONE
    )
    train_accuracy = tf.keras.metrics.BinaryAccuracy()

distributed_dataset = strategy.distribute_datasets_from_function(dataset_fn)
distributed_iterator = iter(distributed_dataset)

@tf.function
def train_step(iterator):
    def replica_step(inputs):
        batch_features, batch_labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(batch_features, training=True)
            per_example_loss = loss_object(batch_labels, predictions)
            loss = tf.nn.compute_average_loss(
                per_example_loss,
                global_batch_size=global_batch_size,
            )
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_accuracy.update_state(batch_labels, predictions)
        return loss

    per_replica_losses = strategy.run(replica_step, args=(next(iterator),))
    return strategy.reduce(
        tf.distribute.ReduceOp.SUM,
        per_replica_losses,
        axis=None,
    )

initial_loss = None
final_loss = None

for _ in range(3):
    train_accuracy.reset_state()
    total_loss = 0.0
    for _ in range(steps_per_epoch):
        total_loss += train_step(distributed_iterator)
    final_loss = total_loss / steps_per_epoch
    if initial_loss is None:
        initial_loss = tf.identity(final_loss)

tf.debugging.assert_equal(strategy.num_replicas_in_sync, worker_count)
tf.debugging.assert_less(final_loss, initial_loss)
tf.debugging.assert_greater(train_accuracy.result(), 0.75)

print(
    f"worker={task_index} replicas={strategy.num_replicas_in_sync} "
    f"initial_loss={float(initial_loss):.4f} "
    f"final_loss={float(final_loss):.4f} "
    f"final_accuracy={float(train_accuracy.result()):.4f}",
    flush=True,
)
