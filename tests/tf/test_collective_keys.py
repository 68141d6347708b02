"""Fresh collective keys per strategy, deterministically (mwnotebook/processes/runtime/collective_keys.py).

Two cells each build a MultiWorkerMirroredStrategy on two real workers. For each strategy the test
reads the key base it was built with (``extended._collective_key_base``: its collectives' group
keys start at 1 + that base) and watches the process's
collective state: ``TFE_EnableCollectiveOps``, TensorFlow's call that replaces it on a live
context, is counted, and the server definition the context holds is compared by identity.

What must hold, every run (not "1 in 40"): the key start is equal on both workers for the same
strategy (else their first collective never meets), differs between the two strategies (else a
rerun's new strategy shares group keys with the old one), and the collective state is set up once
(a second setup on a live context is what lost a peer's group registration). The statistical soak
behind this test is tests/reliability/test_rerun_soak.py. It runs on forked and exec'd workers.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.tf

#: Installs the counters (TensorFlow is imported: by the worker template, or here, which is where an
#: exec'd worker's import-time patches take effect).
SETUP = r'''
import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context
_mw_calls = {"enable_on_live_context": 0}
if not hasattr(pywrap_tfe, "_mw_test_original_enable"):
    pywrap_tfe._mw_test_original_enable = pywrap_tfe.TFE_EnableCollectiveOps
def _mw_counting_enable(*args, _calls=_mw_calls):
    _calls["enable_on_live_context"] += 1
    return pywrap_tfe._mw_test_original_enable(*args)
pywrap_tfe.TFE_EnableCollectiveOps = _mw_counting_enable
_mw_server_defs = []
'''

#: One strategy per cell, then a collective on it (a real all-reduce: the keys must meet).
CELL = r'''
import json
strategy = tf.distribute.MultiWorkerMirroredStrategy()
_mw_server_defs.append(context.context()._collective_ops_server_def)
total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
print("KEYS " + json.dumps({"base": strategy.extended._collective_key_base, "sum": float(total), **_mw_calls,
                            "same_server_def": all(d is _mw_server_defs[0] for d in _mw_server_defs)}))
'''


def _keys(result, worker: int) -> dict:
    return json.loads(next(line for line in result.stdout(worker).splitlines() if line.startswith("KEYS "))[5:])


def test_each_strategy_gets_a_fresh_key_base_equal_on_all_workers(any_cluster):
    any_cluster.run(SETUP, timeout=180)
    first = any_cluster.run(CELL, timeout=180)
    second = any_cluster.run(CELL, timeout=180)
    a = [_keys(first, w) for w in range(2)]
    b = [_keys(second, w) for w in range(2)]
    assert a[0]["sum"] == a[1]["sum"] == 2.0, a  # the all-reduce met across both workers
    assert b[0]["sum"] == b[1]["sum"] == 2.0, b
    assert a[0]["base"] == a[1]["base"] and b[0]["base"] == b[1]["base"], (a, b)  # equal across workers
    assert a[0]["base"] != b[0]["base"], (a, b)  # distinct across strategies
    assert a[0]["base"] > 0 and b[0]["base"] > 0, (a, b)  # not TensorFlow's default 0
    for w in range(2):
        # The first strategy may set the collective state up on a live context (a forked worker's
        # template already created its context); the second must not set it up again.
        assert a[w]["enable_on_live_context"] <= 1, a
        assert b[w]["enable_on_live_context"] == a[w]["enable_on_live_context"], (a, b)
        assert b[w]["same_server_def"], b
