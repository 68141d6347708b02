"""Cells that several test modules run on a ``ParameterServerStrategy`` cluster, written once."""

from __future__ import annotations


def ps_counter_cell(steps: int, label: str) -> str:
    """Stock tutorial code (the resolver from TF_CONFIG) that adds 1 to a variable on the parameter
    servers in ``steps`` scheduled steps and prints ``<label> <total>``: a run that ends with
    ``<label> <steps>.0`` had every step executed once."""
    return f'''
import tensorflow as tf
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    w = tf.Variable(0.0)
@tf.function
def step():
    w.assign_add(1.0)
for _ in range({steps}):
    coordinator.schedule(step)
coordinator.join()
print("{label}", float(w.numpy()), flush=True)
'''
