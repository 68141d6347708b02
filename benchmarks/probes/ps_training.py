"""Parameter-server clusters (``Cluster(workers=N, ps=1)`` = ``%%mwtrain --ps 1 --workers N``):

- time from the first ``run`` of a fresh cluster to its first training step done (cold: the worker
  template's TensorFlow import included; warm: the template already up), split into ready + step;
- steps per second of the PS tutorial-sized Keras model (Dense(10), batch 2, steps_per_execution 10)
  with 1 and 2 worker servers, alternating clusters in one run;
- worker-kill recovery: SIGKILL of worker-0 -> its replacement serving on the same address.

Run: ``python -m benchmarks.probes.ps_training --repeats 3`` (benchmarks/results/ps_training/<commit>.json).
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from benchmarks._suite import median, printed_value, write_result
from mwnotebook import Cluster

FIRST_STEP = r'''
import time, tensorflow as tf
import mwnotebook.worker as mw
strategy, coordinator = mw.ps_strategy(), mw.coordinator()
with strategy.scope():
    w = tf.Variable(0.0)
@tf.function
def step():
    w.assign_add(1.0)
    return w.read_value()
coordinator.schedule(step)
coordinator.join()
print("first_step_at", time.time())
'''

#: The size of TensorFlow's PS tutorial Keras example.
TUTORIAL_FIT = r'''
import time, tensorflow as tf
import mwnotebook.worker as mw
strategy = mw.ps_strategy()
def dataset_fn(context):
    x = tf.random.uniform((10, 10)); y = tf.random.uniform((10,))
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10).repeat().batch(2)
with strategy.scope():
    model = tf.keras.models.Sequential([tf.keras.layers.Dense(10)])
    model.compile(tf.keras.optimizers.SGD(), loss="mse", steps_per_execution=10)
data = tf.keras.utils.experimental.DatasetCreator(dataset_fn)
model.fit(data, epochs=1, steps_per_epoch=20, verbose=0)  # tracing and warm-up
t = time.perf_counter()
model.fit(data, epochs=1, steps_per_epoch=STEPS, verbose=0)
print("steps_per_s", STEPS / (time.perf_counter() - t))
'''


def first_step(workers: int) -> dict[str, float]:
    t0 = time.time()
    cluster = Cluster(workers=workers, ps=1, cpu=True)  # what %%mwtrain --ps 1 --workers N does first
    try:
        cluster.start()
        ready = time.time() - t0
        at = printed_value(cluster.run(FIRST_STEP, timeout=300).stdout(0), "first_step_at")
        return {"ready_s": ready, "to_first_step_s": at - t0}
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    load_before = os.getloadavg()
    cold = first_step(2)  # the first cluster of this process starts the worker template too
    warm = [first_step(2) for _ in range(args.repeats)]
    rates: dict[int, list[float]] = {1: [], 2: []}
    recovery: list[float] = []
    clusters = {n: Cluster(workers=n, ps=1, cpu=True) for n in (1, 2)}
    try:
        for _ in range(args.repeats):
            for n, cluster in clusters.items():  # alternating, side by side
                out = cluster.run(TUTORIAL_FIT.replace("STEPS", str(args.steps)), timeout=600).stdout(0)
                rates[n].append(printed_value(out, "steps_per_s"))
        cluster = clusters[2]
        for _ in range(args.repeats):
            victim = cluster.server_pids["worker-0"]
            t = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            while cluster.server_pids.get("worker-0") in (None, victim):
                if time.monotonic() - t > 120:
                    raise RuntimeError("worker-0 did not come back within 120 s")
                time.sleep(0.02)
            recovery.append(time.monotonic() - t)
        after_kill = printed_value(cluster.run(TUTORIAL_FIT.replace("STEPS", "100"), timeout=600).stdout(0), "steps_per_s")
    finally:
        for cluster in clusters.values():
            cluster.stop()
    payload = {
        "command": f"python -m benchmarks.probes.ps_training --repeats {args.repeats} --steps {args.steps}",
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "first_step_cold": cold,
        "first_step_warm_median": {k: median([w[k] for w in warm]) for k in warm[0]},
        "first_step_warm": warm,
        "steps_per_s": {f"{n}_workers": v for n, v in rates.items()},
        "steps_per_s_median": {f"{n}_workers": median(v) for n, v in rates.items()},
        "ratio_2_over_1": median(rates[2]) / median(rates[1]),
        "worker_kill_to_serving_s": recovery,
        "worker_kill_to_serving_median_s": median(recovery),
        "steps_per_s_after_kills_2_workers": after_kill,
    }
    path = write_result("ps_training", payload)
    print(path.read_text())


if __name__ == "__main__":
    main()
