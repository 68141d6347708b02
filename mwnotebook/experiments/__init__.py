"""Experiments kept and compared: the run history of a notebook kernel and the writers that send a
run to TensorBoard event files and to MLflow (see docs/guide/experiments.md)."""
