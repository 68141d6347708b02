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
state = {
    "before": before,
    "tensorflow_log_level": logging.getLogger("tensorflow").level,
    "global_logs": getattr(training.reduce_per_replica, "mwnotebook_first_for_metrics", False)
                   and getattr(training.Model.evaluate, "mwnotebook_global_logs", False),
    "live_curves": getattr(training.Model.fit, "mwnotebook_wrapped", False),
    "fresh_collective_keys": getattr(cars.CollectiveAllReduceStrategy.__init__, "mwnotebook_fresh_keys", False),
    "collective_ops_once": getattr(context.Context.enable_collective_ops, "mwnotebook_once", False),
    "tqdm_text_bar": tqdm.notebook.tqdm is tqdm.std.tqdm,
}
print("STATE " + json.dumps(state))
'''

PATCHED = {"tensorflow_log_level": 30, "global_logs": True, "live_curves": True, "fresh_collective_keys": True,
           "collective_ops_once": True, "tqdm_text_bar": True}


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
