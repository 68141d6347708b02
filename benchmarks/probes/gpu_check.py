"""GPU check for mwnotebook: two TensorFlow workers on the GPUs of one machine, in one go.

Run from the repository root on a machine with a GPU build of TensorFlow::

    PYTHONUNBUFFERED=1 python -m benchmarks.probes.gpu_check            # ~1-3 min, hard limit 280 s

What it does (prints every step; the last line is ``GPU CHECK PASSED`` or ``GPU CHECK FAILED``):

1. Prerequisites, without importing TensorFlow here: tensorflow, tf_keras, ipykernel,
   jupyter_client and mwnotebook importable; ``nvidia-smi -L`` if present. Missing ones: exit 2.
2. What TensorFlow sees, in a subprocess: version, CUDA/cuDNN build, GPUs, compute capability.
3. Layout: with >= 2 GPUs each worker gets one (``gpus_per_worker=1``, collective NCCL); with
   one GPU both workers share it (memory growth on, collective ring: NCCL cannot put two ranks
   on one device).
4. Cluster A (float32): each worker reports the devices it sees and the strategy's replicas;
   the seed tutorial's training (loss must fall, accuracy > 0.75) with steps/s; a bigger conv
   net with steps/s.
5. Cluster B (``mixed_precision="float16"``): the same conv net, steps/s and the speed-up
   over float32, and the layer compute dtype in the workers.

Installs nothing, uses no network. Exit status: 0 passed, 1 a check failed, 2 prerequisites
missing, 3 ran past the time limit. ``--allow-cpu --small`` runs the same flow on a CPU-only
machine (to test this script itself).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time

T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {text}", flush=True)


def watchdog(limit: float) -> None:
    def fire() -> None:
        say(f"TIMEOUT: still running after {limit:.0f} s; stopping (workers die with this process)")
        print("GPU CHECK FAILED (timeout)", flush=True)
        os._exit(3)

    timer = threading.Timer(limit, fire)
    timer.daemon = True
    timer.start()


def prerequisites() -> list[str]:
    missing = [name for name in ("tensorflow", "tf_keras", "ipykernel", "jupyter_client",
                                 "mwnotebook") if importlib.util.find_spec(name) is None]
    say(f"python {sys.version.split()[0]} at {sys.executable}")
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        say("nvidia-smi -L:\n    " + (out.stdout.strip() or out.stderr.strip()).replace("\n", "\n    "))
    else:
        say("nvidia-smi: not found")
    say(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}")
    return missing


TF_PROBE = r"""
import json, tensorflow as tf
info = tf.sysconfig.get_build_info()
gpus = tf.config.list_physical_devices("GPU")
details = [tf.config.experimental.get_device_details(g) for g in gpus]
print(json.dumps({"version": tf.__version__, "built_with_cuda": tf.test.is_built_with_cuda(),
                  "cuda": info.get("cuda_version"), "cudnn": info.get("cudnn_version"),
                  "gpus": [g.name for g in gpus],
                  "details": [{k: str(v) for k, v in d.items()} for d in details]}))
"""


def probe_tf() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", TF_PROBE], capture_output=True, text=True,
                         timeout=120, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"TensorFlow probe failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


DEVICES_CELL = r"""
import json, os
import mwnotebook.worker as mw
seen = mw.visible_devices()          # before the strategy: creates no tensor
s = mw.strategy()
import tensorflow as tf
seen.update(replicas=s.num_replicas_in_sync,
            collective=s.extended._communication_options.implementation.name,
            logical_gpus=[d.name for d in tf.config.list_logical_devices("GPU")],
            allow_growth=os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"),
            policy=tf.keras.mixed_precision.global_policy().name)
print("MWJSON " + json.dumps(seen))
"""

# The seed tutorial (002), unchanged except: no CUDA_VISIBLE_DEVICES=-1 (we want the GPU), the
# strategy comes from mw.strategy() (the collective chosen for this layout), and timing.
SEED_CELL = r"""
import json, os, time
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw
tf_config = json.loads(os.environ["TF_CONFIG"])
task_index = tf_config["task"]["index"]
worker_count = len(tf_config["cluster"]["worker"])
per_worker_batch_size = 16
global_batch_size = per_worker_batch_size * worker_count
steps_per_epoch = 4

def dataset_fn(input_context):
    rng = np.random.default_rng(7)
    features = rng.normal(size=(256, 8)).astype("float32")
    scores = features[:, 0] * 0.8 + features[:, 1] * 0.6 - features[:, 2] * 0.4 + features[:, 3] * 0.2
    labels = (scores > 0).astype("float32")[:, None]
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    return (tf.data.Dataset.from_tensor_slices((features, labels))
            .shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
            .shuffle(256, seed=7, reshuffle_each_iteration=False).repeat().batch(batch_size)
            .prefetch(tf.data.AUTOTUNE))

strategy = mw.strategy()
tf.keras.utils.set_random_seed(7)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)),
                                 tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.03)
    loss_object = tf.keras.losses.BinaryCrossentropy(reduction=tf.keras.losses.Reduction.NONE)
    train_accuracy = tf.keras.metrics.BinaryAccuracy()
distributed_iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

@tf.function
def train_step(iterator):
    def replica_step(inputs):
        batch_features, batch_labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(batch_features, training=True)
            per_example_loss = loss_object(batch_labels, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        train_accuracy.update_state(batch_labels, predictions)
        return loss
    per_replica_losses = strategy.run(replica_step, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

initial_loss = final_loss = None
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
print(f"worker={task_index} replicas={strategy.num_replicas_in_sync} "
      f"initial_loss={float(initial_loss):.4f} final_loss={float(final_loss):.4f} "
      f"final_accuracy={float(train_accuracy.result()):.4f}", flush=True)
t = time.perf_counter()
for _ in range(SEED_TIMED_STEPS):
    last = train_step(distributed_iterator)
float(last)
print("MWJSON " + json.dumps({"seed_steps_per_s": SEED_TIMED_STEPS / (time.perf_counter() - t)}))
"""

BIG_CELL = r"""
import json, time
import tensorflow as tf
import mwnotebook.worker as mw
s = mw.strategy()
# A conv net: much compute per parameter, so the step measures the GPU, not the all-reduce
# (which goes over gRPC when two workers share one GPU).
SIZE, CHANNELS, DEPTH, PER_REPLICA, STEPS = BIG_SIZE, BIG_CHANNELS, BIG_DEPTH, BIG_BATCH, BIG_STEPS
global_batch = mw.global_batch(PER_REPLICA)
x = tf.random.stateless_normal([global_batch, SIZE, SIZE, 3], seed=[1, 2])
y = tf.random.stateless_uniform([global_batch], seed=[3, 4], maxval=10, dtype=tf.int32)
ds = tf.data.Dataset.from_tensors((x, y)).repeat()
opts = tf.data.Options()
opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
ds = ds.with_options(opts)
with s.scope():
    layers = [tf.keras.layers.Input((SIZE, SIZE, 3))]
    layers += [tf.keras.layers.Conv2D(CHANNELS, 3, padding="same", activation="relu")
               for _ in range(DEPTH)]
    layers += [tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(10),
               tf.keras.layers.Activation("linear", dtype="float32")]
    big = tf.keras.Sequential(layers)
    big.compile(tf.keras.optimizers.SGD(0.01),
                tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

class Clock(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.t = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.t

clock = Clock()
big.fit(ds, epochs=1, steps_per_epoch=5, verbose=0)            # warm-up: tracing, autotuning
hist = big.fit(ds, epochs=1, steps_per_epoch=STEPS, verbose=0, callbacks=[clock])
peak = None
if tf.config.list_logical_devices("GPU"):
    peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**30
print("MWJSON " + json.dumps({"big_steps_per_s": STEPS / clock.seconds,
                              "big_examples_per_s": STEPS * global_batch / clock.seconds,
                              "big_loss": float(hist.history["loss"][-1]),
                              "compute_dtype": big.layers[0].compute_dtype,
                              "global_batch": global_batch, "gpu0_peak_gib": peak}))
"""


def parse_json_lines(text: str) -> dict:
    merged: dict = {}
    for line in text.splitlines():
        if line.startswith("MWJSON "):
            merged.update(json.loads(line[len("MWJSON "):]))
    return merged


def run_cell(cluster, name: str, code: str, timeout: float) -> list[dict]:
    say(f"{name}: running on {cluster.spec.workers} workers")
    t = time.monotonic()
    result = cluster.run(code, timeout=timeout)
    found = []
    for i in range(cluster.spec.workers):
        data = parse_json_lines(result.stdout(i))
        seed_lines = [ln for ln in result.stdout(i).splitlines() if ln.startswith("worker=")]
        for ln in seed_lines:
            say(f"  worker {i}: {ln}")
        say(f"  worker {i}: {json.dumps(data)}")
        found.append(data)
    say(f"{name}: {time.monotonic() - t:.1f} s")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=float, default=280.0, help="hard time limit, seconds")
    parser.add_argument("--allow-cpu", action="store_true", help="run even if TF sees no GPU")
    parser.add_argument("--small", action="store_true", help="small sizes (for a CPU dry run)")
    args = parser.parse_args()
    watchdog(args.limit)

    missing = prerequisites()
    if missing:
        say(f"MISSING in this interpreter: {', '.join(missing)}. This check needs a GPU build of "
            "TensorFlow with tf_keras, ipykernel and jupyter_client, and is run from the repo root. "
            "It installs nothing.")
        print("GPU CHECK FAILED (prerequisites)", flush=True)
        return 2
    try:
        tfinfo = probe_tf()
    except Exception as exc:  # report anything, then fail
        say(str(exc))
        print("GPU CHECK FAILED (TensorFlow probe)", flush=True)
        return 1
    say(f"TensorFlow {tfinfo['version']} built_with_cuda={tfinfo['built_with_cuda']} "
        f"cuda={tfinfo['cuda']} cudnn={tfinfo['cudnn']}")
    say(f"TensorFlow sees GPUs: {tfinfo['gpus']} {tfinfo['details']}")
    gpus = len(tfinfo["gpus"])
    if gpus == 0 and not args.allow_cpu:
        say("TensorFlow sees no GPU: a CPU-only TensorFlow (tensorflow-cpu), a CUDA mismatch "
            "between TensorFlow's build and the driver, or CUDA_VISIBLE_DEVICES hides them.")
        print("GPU CHECK FAILED (no GPU)", flush=True)
        return 1

    from mwnotebook import Cluster, ClusterSpec

    if gpus >= 2:
        layout = dict(gpus_per_worker=1, collective="nccl")
        say("layout: one GPU per worker (gpus_per_worker=1), collective NCCL")
    elif gpus == 1:
        # mwnotebook sets memory growth itself for shared GPUs (config.worker_env.recipe_env); it is
        # also given here so that this check measures the GPU even if that wiring regressed.
        layout = dict(collective="ring", env={"TF_FORCE_GPU_ALLOW_GROWTH": "true"})
        say("layout: both workers share the one GPU (memory growth on), collective ring")
    else:
        layout = dict(cpu=True, collective="ring")
        say("layout: CPU dry run (--allow-cpu)")

    sizes = dict(SEED_TIMED_STEPS=20, BIG_SIZE=16, BIG_CHANNELS=16, BIG_DEPTH=2, BIG_BATCH=8,
                 BIG_STEPS=5) if args.small else \
        dict(SEED_TIMED_STEPS=200, BIG_SIZE=64, BIG_CHANNELS=128, BIG_DEPTH=4, BIG_BATCH=256,
             BIG_STEPS=50)

    def fill(code: str) -> str:
        for key, value in sizes.items():
            code = code.replace(key, str(value))
        return code

    failures: list[str] = []
    results: dict = {}
    try:
        with Cluster(ClusterSpec(workers=2, startup_timeout=150, **layout)) as c:
            seen = run_cell(c, "devices (float32 cluster)", DEVICES_CELL, 120)
            results["devices"] = seen
            for i, s in enumerate(seen):
                # One GPU per worker, one shared GPU, or CPU: one replica per worker.
                if s.get("replicas") != 2:
                    failures.append(f"worker {i}: {s.get('replicas')} replicas, expected 2")
                if gpus and not s.get("logical_gpus"):
                    failures.append(f"worker {i}: TensorFlow in the worker sees no GPU")
            if gpus >= 2:
                sets = [s.get("cuda_visible_devices") for s in seen]
                if len(set(sets)) != 2:
                    failures.append(f"workers did not get disjoint GPUs: {sets}")
            seed = run_cell(c, "seed workload", fill(SEED_CELL), 150)
            results["seed_steps_per_s"] = [s.get("seed_steps_per_s") for s in seed]
            big32 = run_cell(c, "conv net, float32", fill(BIG_CELL), 150)
            results["big_float32"] = big32
        policy = "float16" if gpus else "bfloat16"
        with Cluster(ClusterSpec(workers=2, startup_timeout=150, mixed_precision=policy,
                                 **layout)) as c:
            big16 = run_cell(c, f"conv net, mixed {policy}", fill(BIG_CELL), 150)
            results["big_mixed"] = big16
            for i, s in enumerate(big16):
                if s.get("compute_dtype") != policy:
                    failures.append(f"worker {i}: compute dtype {s.get('compute_dtype')}, "
                                    f"expected {policy}")
    except Exception as exc:  # a failed run is a result to print
        failures.append(f"{type(exc).__name__}: {exc}")

    if "big_float32" in results and "big_mixed" in results:
        r32 = [s.get("big_steps_per_s") or 0 for s in results["big_float32"]]
        r16 = [s.get("big_steps_per_s") or 0 for s in results["big_mixed"]]
        if all(r32) and all(r16):
            say(f"conv net steps/s: float32 {[round(v, 1) for v in r32]}, mixed "
                f"{[round(v, 1) for v in r16]}, speed-up x{min(r16) / min(r32):.2f}")
    say("summary: " + json.dumps(results, default=str))
    if failures:
        for f in failures:
            say(f"FAIL: {f}")
        print("GPU CHECK FAILED", flush=True)
        return 1
    print("GPU CHECK PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
