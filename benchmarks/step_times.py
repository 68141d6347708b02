"""What the slow-worker measurement costs per step: a tf_keras ``fit`` with and without its stamps.

    python -m benchmarks.step_times [--workers 2] [--steps 300] [--repeats 3] [--sleep 0]

``N`` workers (``mwnotebook.Cluster``, forked, CPU) run, alternately, the same ``fit`` (a small dense
model, batches of 32 from memory) with the step stamps (the default) and with
``MWNOTEBOOK_STEP_TIMES=0`` (set in the cell before the model is built, so its step is traced without
them; the automatic Keras callback stays on in both, so the only difference is the two
``tf.py_function`` stamps and the split in the records). Each worker times its own steps after the
first 20 with ``perf_counter`` in a callback; a round's figure is the slowest worker's ms per step.
``--sleep S``: worker 1 sleeps S seconds per batch in its input pipeline, and the cell prints the
verdict the notebook would (shared/step_times.py), to see the line on a real run.

Writes benchmarks/results/step_times/<commit>.json. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import statistics
from typing import Any

from benchmarks._suite import Run, printed_value

log = logging.getLogger("benchmarks.step_times")

CELL = r'''
import os, time
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw

os.environ["MWNOTEBOOK_STEP_TIMES"] = "{switch}"
SLEEP = {sleep} if mw.task_index() == 1 else 0.0
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 32)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
if SLEEP:
    def nap(a):
        time.sleep(SLEEP)
        return a
    data = data.map(lambda a, b: (tf.py_function(nap, [a], tf.float32), b))
data = data.prefetch(2)

class Clock(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 19:
            self.start = time.perf_counter()
    def on_train_end(self, logs=None):
        print("ms_per_step", 1000 * (time.perf_counter() - self.start) / ({steps} - 20))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(32,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(data, epochs=1, steps_per_epoch={steps}, verbose=0, callbacks=[Clock()])
'''


def _slowest_ms(result: Any) -> float:
    texts = ["".join(str(o.content.get("text", "")) for o in outputs if o.msg_type == "stream")
             for outputs in result.outputs]
    return max(printed_value(text, "ms_per_step") for text in texts)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (after one untimed)")
    parser.add_argument("--sleep", type=float, default=0.0, help="worker 1's input sleep per batch (s)")
    args = parser.parse_args()

    from mwnotebook import Cluster
    from mwnotebook.shared.events import Event, WorkerMetrics
    from mwnotebook.shared.step_times import slow_worker_line

    run = Run("step_times")
    samples: dict[str, list[float]] = {"with": [], "without": []}
    lines: list[str] = []
    with Cluster(workers=args.workers, cpu=True, preload=True) as cluster:
        for round_ in range(args.repeats + 1):  # round 0: warm-up, untimed
            for variant, switch in (("with", "1"), ("without", "0")):
                records: list[dict[str, Any]] = []

                def on_event(event: Event, into: list[dict[str, Any]] = records) -> None:
                    if isinstance(event, WorkerMetrics):
                        into.extend(dict(r, worker=event.worker) for r in event.records)

                code = CELL.format(switch=switch, sleep=args.sleep, steps=args.steps)
                result = cluster.run(code, on_event=on_event, timeout=900)
                if round_:
                    samples[variant].append(_slowest_ms(result))
                if variant == "with":
                    lines.append(slow_worker_line(records) or "(no slow worker)")
    medians = {v: round(statistics.median(s), 3) for v, s in samples.items()}
    pairs = [w / wo for w, wo in zip(samples["with"], samples["without"])]
    results = {"workers": args.workers, "steps": args.steps, "sleep": args.sleep, "median_ms_per_step": medians,
               "samples_ms": samples, "ratio_with_over_without": round(statistics.median(pairs), 3),
               "verdict_lines": lines}
    log.info("%d workers, %d steps: with %.2f ms/step, without %.2f ms/step, ratio %.3f (median of pairs)",
             args.workers, args.steps, medians["with"], medians["without"], results["ratio_with_over_without"])
    log.info("verdict: %s", lines[-1])
    log.info("written to %s", run.write(results))


if __name__ == "__main__":
    main()
