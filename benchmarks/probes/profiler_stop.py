"""Does TensorFlow's profiler crash a worker as it stops, without mwnotebook? Two plain processes.

    python -m benchmarks.probes.profiler_stop [--runs 8] [--steps 200] [--start 21]

Each run starts two Python processes by hand (no mwnotebook: TF_CONFIG set in the script, as the
seed's two shell scripts do), each a MultiWorkerMirroredStrategy tf_keras ``fit`` of a small dense
model on batches of 32 from memory (prefetched); each starts ``tf.profiler.experimental.start`` before
step ``--start`` and calls ``tf.profiler.experimental.stop`` after the fit. Prints each run's exit
codes (-6: killed by SIGABRT, -11: SIGSEGV) and the count of runs where a process died.

Measured (docs/guide/profiling.md): TF 2.21 CPU, 12 runs (8 by hand, then ``--runs 4``), 5 with worker 1
killed in the stop (SIGABRT or SIGSEGV), load 4-5. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile

WORKER = r'''
import json, os, sys, tempfile
index, ports, steps, start = int(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4])
os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                      "task": {"type": "worker", "index": index}})
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 32)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).prefetch(2)

class Start(tf.keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch + 1 == start:
            tf.profiler.experimental.start(tempfile.mkdtemp())

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(32,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[Start()])
tf.profiler.experimental.stop()
print("stopped", index, flush=True)
'''


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--start", type=int, default=21)
    args = parser.parse_args()
    script = os.path.join(tempfile.mkdtemp(prefix="mwnotebook-probe-"), "worker.py")
    with open(script, "w") as file:
        file.write(WORKER)
    died = 0
    for run in range(args.runs):
        ports = ",".join(map(str, _free_ports(2)))
        procs = [subprocess.Popen([sys.executable, script, str(i), ports, str(args.steps), str(args.start)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(2)]
        codes = [p.wait(timeout=600) for p in procs]
        died += any(codes)
        print(f"run {run + 1}: exit codes {codes}", flush=True)
    print(f"{died} of {args.runs} runs had a process die")


if __name__ == "__main__":
    main()
