"""Fault injection on real clusters (signals, hangs, floods, rerun soaks, chaos under
``--max-restarts``); every scenario writes a row of ``artifacts/reliability.json``.

Marker: ``reliability`` (some also ``slow``).
Needs: TensorFlow.
"""
