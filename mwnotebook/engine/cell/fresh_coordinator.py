"""A stock parameter-server cell run again: the coordinator kernel is replaced and the cell reruns.

TensorFlow's tutorial cell builds its own ``ParameterServerStrategy`` (``TFConfigClusterResolver()``,
``ParameterServerStrategy(resolver)``). A process can connect to its cluster once, so the coordinator
kernel refuses a second one with :class:`~mwnotebook.processes.runtime.ps_guard.SecondParameterServerStrategy`
(processes/runtime/ps_guard.py says why). The coordinator is mwnotebook's own kernel, not the user's:
rerunning a cell is what notebook users do most, so instead of that error the cell gets a fresh
coordinator kernel and runs once more (:class:`~mwnotebook.engine.async_cluster.AsyncCluster`).

The worker and ps servers keep running when every ps is alive: they hold no state of the old
coordinator's that the new one uses (it makes its variables and datasets anew; the old ones on the
servers are TensorFlow's to collect with the old client's context), the same as a ``--max-restarts``
restart of a lost coordinator (engine/async_cluster.py ``_replace_workers``).
"""

from __future__ import annotations

from mwnotebook.engine.cell.run import CellVerdict
from mwnotebook.processes.runtime.ps_guard import SecondParameterServerStrategy

#: What the coordinator kernel's error is called when the cell made a second strategy there.
SECOND_STRATEGY = SecondParameterServerStrategy.__name__


def needs_fresh_coordinator(verdict: CellVerdict) -> bool:
    """True when the cell failed because it built a second ParameterServerStrategy in its kernel
    (and for no other reason first: an interrupt or a timeout is the user's, not a rerun's)."""
    if verdict.ok or verdict.trigger in ("interrupted", "timeout") or not verdict.failures:
        return False
    cause = verdict.failures[0]
    return cause.kind == "error" and cause.ename == SECOND_STRATEGY


def rerun_line(servers_kept: bool) -> str:
    """The one line the cell's output gets before it runs again."""
    servers = ("the ps and worker servers kept running" if servers_kept else
               "a parameter server was gone, so every server was started afresh too")
    return ("mwnotebook: this cell made a second ParameterServerStrategy, and a coordinator connects to "
            f"its cluster only once: the cell runs again in a fresh coordinator kernel ({servers}; names "
            "earlier cells defined in the coordinator are gone).\n")
