"""TensorFlow's other roles in the engine: the ``--ps`` cluster's worker and ps servers, and the
notebook as coordinator."""
