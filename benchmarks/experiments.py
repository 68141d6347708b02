"""What the run history and each writer cost per cell: side by side, alternating, in one run.

    python -m benchmarks.experiments [--repeats 3] [--fit-repeats 2] [--steps 1000]

A notebook kernel (jupyter_client, as a user's notebook; its Jupyter runtime dir and an MLflow sqlite
store in a temporary directory) runs two kinds of ``%%mwtrain --workers 2 --cpu`` cells: ``noop``
(``pass``) and ``fit`` (a tf_keras ``model.fit`` of ``--steps`` steps, 250 per epoch, that mwnotebook's
callback reports every step: ~2 x steps records). Each kind runs in turn with:

* ``none``: no run history (the session's history swapped for one that keeps nothing; a benchmark
  switch only: a notebook always keeps its runs),
* ``history``: the default (the run kept in memory and in its 0600 files, ``mw_runs`` refreshed),
* ``tensorboard``: + ``--tensorboard DIR`` (event files per run, worker and global),
* ``mlflow``: + ``--mlflow`` (one MLflow run, params, every metric with its step, two artifacts),

all four in each round (so that the machine's load hits them alike), times from request to idle,
medians; and, measured inside the kernel, what each step at the run's end takes: ``record`` (the run
kept: memory, its files), ``mw_runs`` (the DataFrame refreshed), ``writers`` (TensorBoard / MLflow). The first ``--mlflow`` cell of a kernel also imports MLflow's client: reported on its own.
Writes benchmarks/results/experiments/<commit>.json. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._suite import Run, cell, start_kernel, stop_kernel, timed, value

log = logging.getLogger("benchmarks.experiments")

NOOP = "pass"
FIT = '''import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="binary_crossentropy", metrics=["accuracy"])
model.fit(ds, epochs={epochs}, steps_per_epoch=250, verbose=0)
'''
#: Swaps the notebook session's run history (the benchmark's ``none``) in and out; untimed cells.
SWITCH = '''
from mwnotebook.experiments.history import RunHistory, RunRecord
_mw_session = get_ipython().magics_manager.registry["MWMagics"].session
class _NoHistory(RunHistory):
    def record(self, **kw):
        return RunRecord(number=0, line="", cell_hash="", cell="", started=0.0, duration=0.0, workers=0,
                         hosts=(), outcome="ok")
_mw_kept, _mw_none = _mw_session.runs, _NoHistory()

# what each step at a run's end costs, measured inside the kernel (the cells' own times vary by more)
import time as _mw_t
from mwnotebook.experiments import history as _mw_h
from mwnotebook.frontend.notebook import runs_view as _mw_rv
_mw_cost = {}
def _mw_timing(name, function):
    def timed(*args, **kwargs):
        started = _mw_t.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _mw_cost[name] = _mw_cost.get(name, 0.0) + _mw_t.perf_counter() - started
    return timed
_mw_h.RunHistory.record = _mw_timing("record", _mw_h.RunHistory.record)
_mw_rv.send = _mw_timing("writers", _mw_rv.send)
_mw_rv.publish = _mw_timing("mw_runs", _mw_rv.publish)
'''
VARIANTS = {"none": "", "history": "", "tensorboard": "--tensorboard {tb}", "mlflow": "--mlflow bench"}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds of the no-op cells")
    parser.add_argument("--fit-repeats", type=int, default=2, help="timed rounds of the fit cells")
    parser.add_argument("--steps", type=int, default=1000, help="steps of the fit cell (a multiple of 250)")
    args = parser.parse_args()
    run = Run("experiments")
    tmp = Path(tempfile.mkdtemp(prefix="mw-bench-experiments-"))
    (tmp / "runtime").mkdir()
    km, kc = start_kernel({"JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
                           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"})
    results: dict[str, Any] = {"steps": args.steps}
    try:
        cell(kc, "%load_ext mwnotebook")
        cell(kc, SWITCH)
        line = "%%mwtrain --workers 2 --cpu "
        timed(kc, line + "\n" + NOOP)  # the workers start
        started = time.perf_counter()
        timed(kc, line + "--mlflow bench\n" + NOOP)
        results["first_mlflow_cell_s"] = round(time.perf_counter() - started, 2)
        kinds = {"noop": (NOOP, args.repeats), "fit": (FIT.format(epochs=args.steps // 250), args.fit_repeats)}
        for kind, (code, repeats) in kinds.items():
            samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
            parts: dict[str, dict[str, list[float]]] = {v: {} for v in VARIANTS}
            for round_ in range(repeats + 1):  # round 0: warm-up, untimed
                for variant, options in VARIANTS.items():
                    cell(kc, "_mw_session.runs = _mw_none" if variant == "none" else "_mw_session.runs = _mw_kept")
                    cell(kc, "_mw_cost.clear()")
                    seconds = timed(kc, line + options.format(tb=tmp / "tb") + "\n" + code)
                    cost = value(kc, "_mw_cost")
                    if round_:
                        samples[variant].append(seconds)
                        for name, part in cost.items():
                            parts[variant].setdefault(name, []).append(part)
            cell(kc, "_mw_session.runs = _mw_kept")
            medians = {v: round(1000 * statistics.median(s), 1) for v, s in samples.items()}
            inside = {v: {n: round(1000 * statistics.median(x), 2) for n, x in p.items()} for v, p in parts.items()}
            results[kind] = {"median_ms": medians, "inside_kernel_ms": inside,
                             "samples_ms": {v: [round(1000 * x, 1) for x in s] for v, s in samples.items()}}
            log.info("%s: cell %s", kind, ", ".join(f"{v} {ms:.1f} ms" for v, ms in medians.items()))
            log.info("%s: inside the kernel %s", kind, inside)
        kept = int(cell(kc, "print(len(_mw_kept))")[1].strip())
        store = next((tmp / "runtime" / "mwnotebook").glob("runs-*"))
        results["history_runs"] = kept
        results["history_bytes"] = sum(p.stat().st_size for p in store.iterdir())
        cell(kc, "%mwcluster stop")
    finally:
        stop_kernel(km, kc)
    log.info("first --mlflow cell (imports MLflow's client): %.2f s; %d runs kept in %d bytes",
             results["first_mlflow_cell_s"], results["history_runs"], results["history_bytes"])
    log.info("written to %s", run.write(results))


if __name__ == "__main__":
    main()
