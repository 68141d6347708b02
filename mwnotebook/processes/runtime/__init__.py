"""What a worker process does for itself, installed by ``processes/worker_runtime.py``.

Kept out of ``mwnotebook.worker``, whose package imports numpy: a worker's Python without numpy or
TensorFlow must still start (and say what is missing when the cell runs).
"""
