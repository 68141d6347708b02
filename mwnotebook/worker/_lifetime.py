"""Keep a cell's replaced objects alive until every worker has finished that cell.

Measured (tests/reliability, scenario 7): rerunning the seed on warm workers failed about 1 time in
10 with ``Collective ops is aborted by: Delete called on non-empty BufRendezvous``. Rebinding
``strategy = MultiWorkerMirroredStrategy()`` (or a model) frees the previous run's TensorFlow objects
in the middle of the new run's collectives. Keeping everything alive removed the failures (0/25).

So each worker holds a reference to every value in its namespace when a cell starts. The cluster
drops those references with :func:`release` once the cell has ended on *all* workers, when no
collective can be in flight anywhere.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

_held: list[list[Any]] = []
_installed = False


def _hold_namespace(*_info: Any) -> None:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        _held.append(list(shell.user_ns.values()))


def install() -> None:
    """Register the hold in this kernel's IPython (idempotent)."""
    global _installed
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None or _installed:
        return
    shell.events.register("pre_run_cell", _hold_namespace)
    _installed = True


def settle() -> bool:
    """At the end of a cell (answered in the execute_reply's metadata, see
    mwnotebook/processes/runtime/reply.py, or as a user expression; no extra round trip either way):
    True when a :func:`release` between cells is needed.

    A cell that replaced nothing (the hold only references objects the namespace still has), or a
    worker without TensorFlow, needs none: the hold is dropped here at once.
    """
    if not _held:
        return False
    if "tensorflow" not in sys.modules:
        _held.clear()
        return False
    from IPython import get_ipython

    shell = get_ipython()
    current = {id(v) for v in shell.user_ns.values()} if shell is not None else set()
    if any(id(v) not in current for snapshot in _held for v in snapshot):
        return True
    _held.clear()
    return False


def release() -> int:
    """Drop the held references; returns how many cells' worth.

    TensorFlow objects (strategies, models) sit in reference cycles, which only the garbage
    collector frees: left to run whenever, it could free them in the middle of the next cell's
    collectives, so it runs here, between cells. Without TensorFlow loaded there is nothing to
    protect, and a full collection (tens of ms) would only slow every cell down.
    """
    count = len(_held)
    if count:
        _held.clear()
        if "tensorflow" in sys.modules:
            gc.collect()
    return count
