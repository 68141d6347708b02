"""mw.strategy / mw.num_replicas / mw.global_batch on a real two-worker CPU cluster."""

from __future__ import annotations

import pytest

from testbed.modules import require

require("tensorflow", "pip install -e '.[tensorflow-cpu]'")

from mwnotebook import Cluster, ClusterRunError  # noqa: E402 (after the optional-import check)

pytestmark = [pytest.mark.tf, pytest.mark.slow]

FIRST_CELL = """
import mwnotebook.worker as mw
before = mw.num_replicas()          # safe before the strategy: creates no tensor
s = mw.strategy()                   # collective from %%mwtrain --collective (ring here)
import tensorflow as tf
print(before, s.num_replicas_in_sync, mw.num_replicas(), mw.global_batch(16),
      s.extended._communication_options.implementation.name, id(s))
"""

SECOND_CELL = """
s2 = mw.strategy()
total = s2.reduce(tf.distribute.ReduceOp.SUM, s2.run(lambda: tf.constant(1.0)), axis=None)
print(s2 is s, id(s2), float(total))
"""


def last_line(result, worker: int) -> str:
    """The cell's own print: TensorFlow's INFO log lines may come before it on stdout."""
    return result.stdout(worker).strip().splitlines()[-1]


@pytest.fixture(scope="module")
def cluster():
    with Cluster(workers=2, cpu=True, collective="ring", startup_timeout=120) as c:
        yield c


def test_strategy_is_created_once_with_ring_and_reused_across_cells(cluster):
    first = cluster.run(FIRST_CELL, timeout=180)
    ids = []
    for i in range(2):
        before, replicas, helper, global_batch, impl, ident = last_line(first, i).split()
        assert (before, replicas, helper, global_batch, impl) == ("2", "2", "2", "32", "RING")
        ids.append(ident)
    second = cluster.run(SECOND_CELL, timeout=120)
    for i in range(2):
        same, ident, total = last_line(second, i).split()
        assert same == "True" and ident == ids[i]
        assert float(total) == 2.0  # a real all-reduce over both workers


def test_asking_for_other_options_later_is_explained(cluster):
    with pytest.raises(ClusterRunError) as err:
        cluster.run("mw.strategy('nccl')", timeout=60)
    assert err.value.ename == "StrategyError"
    assert "already has its strategy" in err.value.evalue and "restart" in err.value.evalue


def test_nccl_without_gpu_is_explained_and_the_worker_stays_usable(cluster):
    cluster.restart()
    with pytest.raises(ClusterRunError) as err:
        cluster.run("import mwnotebook.worker as mw\nmw.strategy('nccl')", timeout=120)
    assert err.value.ename == "StrategyError"
    assert "needs GPUs" in err.value.evalue and "ring" in err.value.evalue
    # The check ran no TF op, so the same processes can still build a (ring) strategy.
    cluster.restart() if err.value.restarted else None
    ok = cluster.run("import mwnotebook.worker as mw\ns = mw.strategy('ring', timeout=30)\n"
                     "print(s.num_replicas_in_sync, s.extended._communication_options.timeout_seconds)",
                     timeout=120)
    assert [last_line(ok, i) for i in range(2)] == ["2 30", "2 30"]


def test_a_tf_op_before_the_strategy_is_explained(cluster):
    cluster.restart()
    with pytest.raises(ClusterRunError) as err:
        cluster.run("import tensorflow as tf, mwnotebook.worker as mw\ntf.constant(1)\nmw.strategy()",
                    timeout=120)
    assert err.value.ename == "StrategyError"
    assert "before any other TensorFlow op" in err.value.evalue


def test_workers_report_the_devices_tensorflow_sees(cluster):
    res = cluster.run("import json, os, mwnotebook.worker as mw\n"
                      "print(json.dumps(dict(mw.visible_devices(), "
                      "collective=os.environ['MWNOTEBOOK_COLLECTIVE'])))", timeout=120)
    import json

    for i in range(2):
        seen = json.loads(last_line(res, i))
        assert seen["cuda_visible_devices"] == "-1" and seen["gpus"] == []   # --cpu
        assert seen["cpus"] and seen["collective"] == "ring"
