"""How the notebook side tells a worker which collective implementation its strategy uses: the names
``--collective`` accepts and the variable it travels in. Both sides read them here: the spec's check
and the option's choices (config/spec.py, config/options.py), the worker's environment
(config/worker_env.py) and ``mw.strategy()`` in the worker kernel (worker/_strategy.py)."""

from __future__ import annotations

#: ``--collective``'s values; ``auto`` lets TensorFlow choose (NCCL with GPUs, ring otherwise).
COLLECTIVES = ("auto", "ring", "nccl")

#: The environment variable ``%%mwtrain --collective`` sets in each worker (unset for ``auto``).
COLLECTIVE_ENV = "MWNOTEBOOK_COLLECTIVE"
