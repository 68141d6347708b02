"""Give every MultiWorkerMirroredStrategy a collective key range of its own.

Measured (benchmarks/faults.py soak, results in benchmarks/README.md):
each strategy instance starts its collective group keys at
``1 + CollectiveAllReduceStrategy._collective_key_base`` (a class attribute, 0 by default). A cell
that builds a new strategy on every run therefore reuses group 1 in the same process, while the old
strategy's collectives or rendezvous may still be alive: about 1 rerun in 40-80 hung or aborted with
``group 1 not found``. TensorFlow's own tests avoid it by raising the key base per strategy.

Measured next (this module with fresh keys only, under load): 2 hangs in 16 reruns, both workers
blocked in the broadcast of the model's first variable. The reason is in TensorFlow's strategy
constructor: every new MultiWorkerMirroredStrategy calls ``context.enable_collective_ops(server_def)``
again (``_std_server_started`` is per instance), and on a live context that replaces the process's
collective state -- the group table a peer may already have registered in. One worker building its
new strategy while the other has begun its first collective loses that registration: the peer
waits forever (fresh group key) or is told "group 1 not found" (reused key). So a second
``enable_collective_ops`` with the very same server definition is skipped here: the server and
its collective state stay as the first strategy set them up. A different definition still goes
through TensorFlow's own path.

This module does both for the unchanged cell, from inside the worker: when TensorFlow loads its
``collective_all_reduce_strategy`` module, the strategy constructors are wrapped to give each new
instance a fresh base. Nothing here imports TensorFlow or creates an op; the cell cannot tell
(only the private ``_collective_key_base`` differs).

The base must be equal on every worker for the same strategy, or the workers' group keys differ
and their first collective never meets (it waits until a timeout). So it is derived from state that
is equal on all workers of a cell run in lockstep: IPython's execution count (every user cell runs on
every worker, and silent requests do not count) and the number of strategies built so far in this
cell. A cell that builds a different number of strategies on different workers (say, only on worker
0) desynchronises the keys only within that cell; the next cell starts in step again.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Any

from mwnotebook.processes.runtime.after_import import marked, patch_when_imported, stacked_on

log = logging.getLogger(__name__)

TARGET_MODULE = "tensorflow.python.distribute.collective_all_reduce_strategy"
#: Key range per strategy. A strategy uses a handful of group keys (one per device group); TF's
#: tests space theirs by 100000. Group keys are int32.
KEY_SPACING = 1000
#: Strategies per cell before the ranges of the next cell are borrowed (a warning is logged).
STRATEGIES_PER_CELL = 64
_INT32_MAX = 2**31 - 1
#: ``0`` turns the patch off (to measure the failure rate without it).
DISABLE_ENV = "MWNOTEBOOK_COLLECTIVE_KEY_SPACING"

_state = {"cell": -1, "in_cell": 0}


def _execution_count() -> int:
    try:
        from IPython import get_ipython

        shell = get_ipython()
        return int(shell.execution_count) if shell is not None else 0
    except Exception:
        return 0


def next_key_base() -> int:
    """The key base of the next strategy built in this process (equal on every worker)."""
    cell = _execution_count()
    if cell != _state["cell"]:
        _state["cell"], _state["in_cell"] = cell, 0
    slot = cell * STRATEGIES_PER_CELL + _state["in_cell"]
    if _state["in_cell"] >= STRATEGIES_PER_CELL:
        log.warning("more than %d MultiWorkerMirroredStrategy objects in one cell: their collective "
                    "keys overlap those of the next cell", STRATEGIES_PER_CELL)
    _state["in_cell"] += 1
    span = _INT32_MAX // KEY_SPACING - 1
    return (slot % span + 1) * KEY_SPACING


def patch_enable_collective_ops() -> None:
    """Make a repeated ``enable_collective_ops`` with an identical server definition a no-op."""
    from tensorflow.python.eager import context

    cls = context.Context
    if marked(cls.enable_collective_ops, "mwnotebook_once"):
        return
    original = cls.enable_collective_ops

    def enable_collective_ops(self: Any, server_def: Any) -> None:
        current = getattr(self, "_collective_ops_server_def", None)
        if (current is not None and server_def is not None and self._context_handle is not None
                and current.SerializeToString() == server_def.SerializeToString()):
            log.debug("collective ops already enabled with this server definition: kept as they are")
            return
        original(self, server_def)

    cls.enable_collective_ops = stacked_on(original, enable_collective_ops, "mwnotebook_once")


def patch_strategy_classes(module: ModuleType) -> None:
    """Wrap the constructors of the collective strategies of ``module`` (idempotent)."""
    patch_enable_collective_ops()
    for name in ("CollectiveAllReduceStrategy", "CollectiveAllReduceStrategyV1"):
        cls = getattr(module, name, None)
        if cls is None or marked(cls.__init__, "mwnotebook_fresh_keys"):
            continue
        original = cls.__init__

        def __init__(self: Any, *args: Any, __original: Any = original, __cls: Any = cls, **kwargs: Any) -> None:
            # A class attribute: CollectiveAllReduceExtended reads it from the instance while the
            # constructor runs; later strategies set their own value the same way.
            # TensorFlow's private knob, the one its own tests raise (see this module's docstring)
            __cls._collective_key_base = next_key_base()  # noqa: SLF001
            __original(self, *args, **kwargs)

        cls.__init__ = stacked_on(original, __init__, "mwnotebook_fresh_keys")


def install() -> None:
    """Arrange the patch for when TensorFlow is imported (or apply it now if it already is)."""
    if os.environ.get(DISABLE_ENV) == "0":
        return
    patch_when_imported(TARGET_MODULE, patch_strategy_classes)
