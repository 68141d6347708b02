"""What ``--profile`` costs: the same tf_keras ``fit`` with and without TensorFlow's profiler on every worker.

    python -m benchmarks.profile [--workers 2] [--steps 200] [--window 21:40] [--repeats 3]

``N`` workers (``mwnotebook.Cluster``, forked, CPU) run, alternately, the same ``fit`` (a small dense
model, batches of 32 from memory, a prefetched pipeline) through ``Cluster.run`` and through
``mwnotebook.run_profiled`` (what ``%%mwtrain --profile DIR --profile-steps A:B`` calls): arming every
worker, the cell, each worker's summary. Figures per round, each the slowest worker's:

* ``cell_s``: the whole call in the notebook process (the profiled one with its two short runs);
* ``ms_per_step``: the worker's own clock over steps 20 to the end (``perf_counter`` in a callback), the
  traced window inside it;
* ``window_ms_per_step``: the profiled run's steps in the window (its summary's mean step) against
  the same steps of the run without (the worker's clock over the window's steps).

Writes benchmarks/results/profile/<commit>.json and the traces into a temporary folder (removed).
Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from typing import Any

from benchmarks._suite import Run, printed_value

log = logging.getLogger("benchmarks.profile")

CELL = r'''
import time
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 32)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32).prefetch(2)
FIRST, LAST = {first}, {last}

class Clock(tf.keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch + 1 == FIRST:
            self.window = time.perf_counter()
    def on_train_batch_end(self, batch, logs=None):
        if batch == 19:
            self.start = time.perf_counter()
        if batch + 1 == LAST:
            print("window_ms_per_step", 1000 * (time.perf_counter() - self.window) / (LAST - FIRST + 1))
    def on_train_end(self, logs=None):
        print("ms_per_step", 1000 * (time.perf_counter() - self.start) / ({steps} - 20))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(32,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(data, epochs=1, steps_per_epoch={steps}, verbose=0, callbacks=[Clock()])
'''


def _slowest(result: Any, key: str) -> float:
    texts = ["".join(str(o.content.get("text", "")) for o in outputs if o.msg_type == "stream")
             for outputs in result.outputs]
    return max(printed_value(text, key) for text in texts)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--window", default="21:40", help="the traced steps, A:B (inside 20..steps)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (after one untimed)")
    args = parser.parse_args()

    from mwnotebook import Cluster
    from mwnotebook.experiments.profile import ProfileRequest, parse_steps, run_profiled

    first, last = parse_steps(args.window)
    if not 20 < first <= last <= args.steps:
        parser.error(f"--window must lie within steps 21..{args.steps}")
    run = Run("profile")
    keys = ("cell_s", "ms_per_step", "window_ms_per_step")
    samples: dict[str, dict[str, list[float]]] = {v: {k: [] for k in keys} for v in ("with", "without")}
    folder = tempfile.mkdtemp(prefix="mwnotebook-bench-profile-")
    trace_bytes: list[int] = []
    lost: list[str] = []
    code = CELL.format(steps=args.steps, first=first, last=last)
    try:
        with Cluster(workers=args.workers, cpu=True, preload=True) as cluster:
            for round_ in range(args.repeats + 1):  # round 0: warm-up, untimed
                for variant in ("with", "without"):
                    began = time.perf_counter()
                    if variant == "with":
                        result, summary = run_profiled(cluster, code, ProfileRequest(folder, first, last), timeout=900)
                        if summary.lost:  # TensorFlow's profiler crashed a worker as it stopped (the guide)
                            lost.append(summary.lost)
                            window = float("nan")
                        else:
                            window = max((w.step or 0.0) * 1000 for w in summary.workers)
                        if round_:
                            import os

                            trace_bytes.extend(os.path.getsize(t) for t in summary.traces())
                    else:
                        result = cluster.run(code, timeout=900)
                        window = _slowest(result, "window_ms_per_step")
                    cell = time.perf_counter() - began
                    if round_:
                        figures = samples[variant]
                        figures["cell_s"].append(cell)
                        figures["ms_per_step"].append(_slowest(result, "ms_per_step"))
                        figures["window_ms_per_step"].append(window)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    def median(values: list[float]) -> float:
        kept = [v for v in values if v == v]  # not the NaN of a lost summary
        return round(statistics.median(kept), 3) if kept else float("nan")

    medians = {v: {k: median(s) for k, s in fig.items()} for v, fig in samples.items()}
    ratios = {k: median([w / wo for w, wo in zip(samples["with"][k], samples["without"][k])]) for k in keys}
    results = {"workers": args.workers, "steps": args.steps, "window": [first, last], "medians": medians,
               "ratio_with_over_without": ratios, "samples": samples,
               "trace_kib_per_worker": round(statistics.median(trace_bytes) / 1024, 1) if trace_bytes else None,
               "summaries_lost": lost}
    log.info("%d workers, %d steps, window %d-%d: %s", args.workers, args.steps, first, last, medians)
    log.info("with / without (median of pairs): %s; trace %s KiB per worker; summaries lost: %d", ratios,
             results["trace_kib_per_worker"], len(lost))
    log.info("written to %s", run.write(results))


if __name__ == "__main__":
    main()
