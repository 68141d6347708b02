"""Live curves from remote workers: a stock ``model.fit`` on SSH test hosts (network namespaces,
testbed/netns_hosts.py) gives metric records from every worker, as local workers do -- with
kernels forked from the hosts' worker templates and with fresh kernels.

The worker hooks that add the Keras reporter to ``fit`` (processes/worker_hooks.py) are installed
by mwnotebook's worker kernel, which remote hosts that can import mwnotebook now run
(tests/remote/test_remote_worker_runtime.py), and else by the set-up code every worker runs after it
starts (engine/workers/bootstrap.py ``HOOKS_CODE``); before both, such a fit sent no record at all."""

from __future__ import annotations

import pytest

from mwnotebook import Cluster
from testbed import netns_hosts

#: Hang bounds only, generous for a loaded 2-core machine (each case takes ~20 s here).
pytestmark = [pytest.mark.remote, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]

EPOCHS, STEPS = 3, 8

#: A stock tf_keras fit: no mwnotebook import, no callback of ours, verbose=0.
FIT_CELL = f'''
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=({STEPS * 32}, 4)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
history = model.fit(dataset, epochs={EPOCHS}, verbose=0)
print("loss", history.history["loss"][-1], flush=True)
'''


@pytest.mark.parametrize("template", [True, False], ids=["forked", "fresh"])
def test_a_stock_fit_on_ssh_workers_sends_metric_records_from_each(
        ssh_home: netns_hosts.TestNet, template: bool) -> None:
    hosts = tuple(h.alias for h in ssh_home.hosts)
    with Cluster(hosts=hosts, cpu=True, template=template) as cluster:
        result = cluster.run(FIT_CELL, timeout=400)
    for worker in range(2):
        assert any(line.startswith("loss ") for line in result.stdout(worker).splitlines()), \
            result.stdout(worker)[-2000:]
        mine = [r for r in result.metrics if r.get("worker") == worker]
        epochs = [r for r in mine if r.get("kind") == "epoch"]
        batches = [r for r in mine if r.get("kind") == "batch"]
        # Every epoch's end, with Keras' own epoch loss and the global value the chart draws.
        assert [r["epoch"] for r in epochs] == list(range(EPOCHS)), mine
        assert all("loss" in r and "global_loss" in r and "global_accuracy" in r for r in epochs), epochs
        # Every batch (each of the 8 global batches is split between the workers: 8 steps each per epoch).
        assert len(batches) == EPOCHS * STEPS, batches
        assert [r["step"] for r in batches] == list(range(1, len(batches) + 1))
