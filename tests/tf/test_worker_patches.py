"""Every import-time patch of a worker is in place, whether the module was imported by the user's
cell (an exec'd worker) or before the worker existed (a worker forked from a template that
preloaded TensorFlow and tf_keras): one helper, processes/runtime/after_import.py, does both."""

from __future__ import annotations

import json

import pytest

from mwnotebook import Cluster

pytestmark = pytest.mark.tf

CELL = r'''
import json, logging, sys
before = {name: name in sys.modules for name in ("tensorflow", "tf_keras.src.engine.training", "tqdm.notebook")}
import tensorflow as tf
from tf_keras.src.engine import training
from tensorflow.python.distribute import collective_all_reduce_strategy as cars
from tensorflow.python.eager import context
import tqdm.notebook, tqdm.std
from mwnotebook.processes.runtime.after_import import marked
state = {
    "before": before,
    "tensorflow_log_level": logging.getLogger("tensorflow").level,
    "global_logs": getattr(training.reduce_per_replica, "mwnotebook_first_for_metrics", False)
                   and getattr(training.Model.evaluate, "mwnotebook_global_logs", False),
    "live_curves": getattr(training.Model.fit, "mwnotebook_wrapped", False),
    "fresh_collective_keys": marked(cars.CollectiveAllReduceStrategy.__init__, "mwnotebook_fresh_keys"),
    "collective_ops_once": marked(context.Context.enable_collective_ops, "mwnotebook_once"),
    # the strategy constructor is wrapped twice (fresh keys inside, the --ps guard outside)
    "ps_guard": marked(cars.CollectiveAllReduceStrategy.__init__, "mw_ps_guard"),
    "ps_verbose": marked(training._get_verbosity, "mw_ps_verbose"),
    "tqdm_text_bar": tqdm.notebook.tqdm is tqdm.std.tqdm,
}
print("STATE " + json.dumps(state))
'''

PATCHED = {"tensorflow_log_level": 30, "global_logs": True, "live_curves": True, "fresh_collective_keys": True,
           "collective_ops_once": True, "ps_guard": True, "ps_verbose": True,
           "tqdm_text_bar": True}


def _state(result, worker: int) -> dict:
    return json.loads(next(line for line in result.stdout(worker).splitlines() if line.startswith("STATE "))[6:])


def test_forked_workers_patch_what_their_template_imported(tf_cluster):
    result = tf_cluster.run(CELL, timeout=120)
    for w in range(2):
        state = _state(result, w)
        assert state.pop("before")["tf_keras.src.engine.training"], "the template preloads tf_keras"
        assert state == PATCHED


def test_exec_workers_patch_at_the_first_import(no_orphans):
    with Cluster(workers=1, cpu=True, template=False) as cluster:
        state = _state(cluster.run(CELL, timeout=120), 0)
    assert state.pop("before") == {"tensorflow": False, "tf_keras.src.engine.training": False, "tqdm.notebook": False}
    assert state == PATCHED


#: A ``fit`` with no mwnotebook callback in the cell: the live-curves patch adds it.
FIT_NO_CALLBACK = r'''
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
history = model.fit(ds, epochs=2, steps_per_epoch=5, verbose=0)
'''


def test_a_fit_without_a_callback_sends_live_curves_from_every_worker(any_cluster):
    """The behaviour behind the ``live_curves`` marker, on forked and on exec'd workers: metrics
    records arrive from both workers while ``fit`` runs, one per batch (2 epochs x 5 steps)."""
    from mwnotebook.shared.events import WorkerMetrics

    got: list[WorkerMetrics] = []
    any_cluster.run(FIT_NO_CALLBACK, on_event=lambda e: isinstance(e, WorkerMetrics) and got.append(e), timeout=300)
    for w in range(2):
        batches = [r for m in got if m.worker == w for r in m.records if r.get("kind") == "batch"]
        assert len(batches) == 10, (w, batches[:3])
        assert all("loss" in r or "global_loss" in r for r in batches), batches[:3]
