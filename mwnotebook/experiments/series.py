"""A run's metric records as named scalar series, the one naming TensorBoard and MLflow share.

Each scalar belongs to a *folder*: ``worker-<i>`` (that worker's own values) or ``global`` (the
values over all workers: ``global_<name>`` without its prefix, taken from the first worker that
reported it, as all send the same). Step records keep their metric's name and step; epoch summaries
are ``epoch_<name>`` at the epoch's index (Keras' own ``TensorBoard`` callback names them so).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from mwnotebook.experiments.history import GLOBAL
from mwnotebook.shared.metrics import GLOBAL_PREFIX, META_KEYS, as_float

#: (folder, tag, step, wall time, value)
Scalar = tuple[str, str, int, float, float]


def scalars(metrics: Sequence[Mapping[str, Any]]) -> Iterator[Scalar]:
    """Every scalar of the run's records in their order, each with its folder (see the module docstring)."""
    global_source: dict[str, Any] = {}
    for record in metrics:
        worker = record.get("worker")
        epoch = record.get("kind") == "epoch"
        at = record.get("epoch") if epoch else record.get("step")
        step = as_float(at)
        if step is None:
            continue
        wall = as_float(record.get("time")) or time.time()
        for key, value in record.items():
            number = as_float(value)
            if key in META_KEYS or number is None:
                continue
            if key.startswith(GLOBAL_PREFIX):
                name = key[len(GLOBAL_PREFIX):]
                source = global_source.setdefault(("epoch:" if epoch else "") + name, worker)
                if worker != source:
                    continue
                folder = GLOBAL
            elif worker is None:
                continue
            else:
                folder, name = f"worker-{worker}", key
            yield folder, ("epoch_" + name) if epoch else name, int(step), wall, number


