# Fails on worker 1 only, after the strategy exists, while worker 0 blocks in a collective that
# worker 1 never joins. Used by the CLI and export tests to check failure handling and cleanup.
import json
import os

import tensorflow as tf

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(f"worker={index} strategy ready", flush=True)
if index == 1:
    raise ValueError("worker 1 fails on purpose")
total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
print(f"worker={index} unexpectedly finished the collective: {float(total)}", flush=True)
