"""Step time of a 2-worker tf_keras ``fit`` with global batch logs (the worker's hook) vs Keras' own.

The hook takes the first replica's value for the model's metrics instead of summing them over the
replicas, which removes one collective per metric and step; this checks that it costs nothing.
Both ways run alternately on the same model in the same two workers (each switch retraces the step
function; the first epoch of every fit is the warm-up and is not counted).

    python -m benchmarks.probes.keras_global_logs --repeats 6 --steps 100
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks._suite import median, write_result
from mwnotebook import Cluster

SETUP = r'''
import json, time
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 32)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
train = strategy.distribute_datasets_from_function(
    lambda ctx: tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    .repeat().batch(32).prefetch(2))
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(32,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy",
                  metrics=["accuracy", tf.keras.metrics.Precision(), tf.keras.metrics.AUC()])

class StepTimes(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        self.last = time.perf_counter() - self.start

def timed(global_logs, steps):
    mw.auto_keras_callback(global_logs)
    times = StepTimes()
    model.fit(train, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[times])
    return times.last / steps
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    per_step: dict[str, list[float]] = {"global": [], "keras_sum": []}
    with Cluster(workers=2, cpu=True) as cluster:
        cluster.run(SETUP, timeout=300)
        for i in range(args.repeats):
            order = ("global", "keras_sum") if i % 2 == 0 else ("keras_sum", "global")
            for way in order:
                code = f"print('STEP', timed({way == 'global'}, {args.steps}))"
                out = cluster.run(code, timeout=600).stdout(0)
                per_step[way].append(float(out.split("STEP", 1)[1].split()[0]))
    result = {"steps": args.steps, "repeats": args.repeats, "seconds_per_step": per_step,
              "median_global_ms": 1000 * median(per_step["global"]),
              "median_keras_sum_ms": 1000 * median(per_step["keras_sum"])}
    result["ratio_global_to_keras_sum"] = result["median_global_ms"] / result["median_keras_sum_ms"]
    path = write_result("keras_global_logs", result)
    json.dump({k: v for k, v in result.items() if k != "seconds_per_step"}, sys.stdout, indent=2)
    print(f"\n-> {path}")


if __name__ == "__main__":
    main()
