"""What per-worker-server curves cost a ``--ps`` custom loop (``mw.report(step=i, scheduled=rv)``).

One ``Cluster(workers=2, ps=1)`` (= ``%%mwtrain --ps 1 --workers 2``), the tutorial-sized model
(Dense(10), batch 2) in a custom loop whose step function returns ``{"loss", "worker"}``; the cell
is run alternately, side by side in one run, in three ways:

- ``none``: no reporting (the tutorial's loop; its RemoteValues are dropped at once);
- ``kept``: no reporting, but every RemoteValue kept in a list: what holding the results costs by
  itself (TensorFlow then keeps each closure's output tensors, which it skips for a dropped value);
- ``scheduled``: ``mw.report(step=i, scheduled=coordinator.schedule(...))`` every step (ours: the
  RemoteValue stays buffered until ready, fetched by the reporter's timer);
- ``fetch_each``: the naive way, ``coordinator.schedule(...).fetch()`` every step, then report: the
  loop waits for every closure.

steps/s = STEPS / (first schedule -> ``coordinator.join()`` returned), measured in the cell; the
records that reached the notebook are counted per worker server.

Run: ``python -m benchmarks.probes.ps_report_curves --repeats 3 --steps 400`` (benchmarks/results/ps_report_curves/<commit>.json).
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks._suite import median, printed_value, write_result
from mwnotebook import Cluster

SETUP = r'''
import time, tensorflow as tf
import mwnotebook.worker as mw
strategy, coordinator = mw.ps_strategy(), mw.coordinator()
with strategy.scope():
    model = tf.keras.models.Sequential([tf.keras.layers.Dense(10)])
    model.build((None, 10))
    optimizer = tf.keras.optimizers.SGD(0.01)
def dataset_fn():
    x = tf.random.uniform((10, 10)); y = tf.random.uniform((10,))
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10).repeat().batch(2)
@tf.function
def per_worker_dataset_fn():
    return strategy.distribute_datasets_from_function(lambda _ctx: dataset_fn())
iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
@tf.function
def step_fn(it):
    def replica_fn(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y[:, None]))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    x, y = next(it)
    loss = strategy.run(replica_fn, args=(x, y))
    return {"loss": loss, "worker": tf.distribute.coordinator.experimental_get_current_worker_index()}
for _ in range(20):  # tracing and warm-up
    coordinator.schedule(step_fn, args=(iterator,))
coordinator.join()
print("ready")
'''

LOOPS = {
    "none": "    coordinator.schedule(step_fn, args=(iterator,))",
    "kept": "    kept.append(coordinator.schedule(step_fn, args=(iterator,)))",
    "scheduled": "    mw.report(step=i, scheduled=coordinator.schedule(step_fn, args=(iterator,)))",
    "fetch_each": ("    out = coordinator.schedule(step_fn, args=(iterator,)).fetch()\n"
                   "    mw.report(step=i, loss=float(out['loss']))"),
}

CELL = r'''
kept = []
t = time.perf_counter()
for i in range(STEPS):
LOOP
coordinator.join()
print("steps_per_s", STEPS / (time.perf_counter() - t))
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    load_before = os.getloadavg()
    rates: dict[str, list[float]] = {name: [] for name in LOOPS}
    cell_s: dict[str, list[float]] = {name: [] for name in LOOPS}
    per_server: list[dict[str, int]] = []
    with Cluster(workers=2, ps=1, cpu=True) as cluster:
        cluster.start()
        cluster.run(SETUP, timeout=600)
        for _ in range(args.repeats):
            for name, loop in LOOPS.items():  # alternating, side by side
                cell = CELL.replace("LOOP", loop).replace("STEPS", str(args.steps))
                t = time.perf_counter()
                result = cluster.run(cell, timeout=600)
                cell_s[name].append(time.perf_counter() - t)  # includes the cell end's flush
                rates[name].append(printed_value(result.stdout(0), "steps_per_s"))
                if name == "scheduled":
                    counts: dict[str, int] = {}
                    for record in result.metrics:
                        key = str(record.get("server"))
                        counts[key] = counts.get(key, 0) + 1
                    per_server.append(counts)
    medians = {name: median(v) for name, v in rates.items()}
    payload = {
        "command": f"python -m benchmarks.probes.ps_report_curves --repeats {args.repeats} --steps {args.steps}",
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "steps_per_s": rates, "steps_per_s_median": medians,
        "scheduled_over_none": medians["scheduled"] / medians["none"],
        "fetch_each_over_none": medians["fetch_each"] / medians["none"],
        "kept_over_none": medians["kept"] / medians["none"],
        "scheduled_over_kept": medians["scheduled"] / medians["kept"],
        "cell_seconds": cell_s, "cell_seconds_median": {name: median(v) for name, v in cell_s.items()},
        "records_per_server_scheduled": per_server,
    }
    path = write_result("ps_report_curves", payload)
    print(path.read_text())


if __name__ == "__main__":
    main()
