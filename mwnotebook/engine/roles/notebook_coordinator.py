"""``--coordinator notebook``: the notebook's own process is a ``--ps`` cluster's coordinator.

The cluster starts its worker and ps servers as usual (engine/roles/task_servers.py) but no coordinator
kernel; this process gets the chief's variables instead (``TF_CONFIG``, ``GRPC_FAIL_FAST``,
``TF_USE_LEGACY_KERAS``), so ``mw.ps_strategy()`` or the stock ``TFConfigClusterResolver`` connects
from here. It is an opt-in because of what a process that connects to a TensorFlow cluster keeps
(measured on TF 2.21 CPU, see engine/roles/task_servers.py):

- the gRPC server TensorFlow starts in this process for the chief task listens, without any
  authentication, on every interface of the machine, and nothing stops it before the process ends;
- the notebook kernel cannot enter a private network namespace, so the servers live on the host
  network too (config/role_checks.py refuses ``--network private``);
- connecting the same process to a second cluster leaves the first server listening, makes the
  first cluster's variables invalid, and touching the first ``ClusterCoordinator`` afterwards
  crashed the process: here that is the user's kernel. So once this process has made a
  ``ParameterServerStrategy``, a second cluster is refused unless ``force`` is given.

The record is per process (module state): one notebook kernel, one joined cluster.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from mwnotebook.config.roles import RoleLayout
from mwnotebook.errors import ConfigError
from mwnotebook.processes.runtime.after_import import patch_when_imported

log = logging.getLogger(__name__)

#: The chief's variables this process takes over while it coordinates a cluster.
JOIN_VARIABLES = ("TF_CONFIG", "GRPC_FAIL_FAST", "TF_USE_LEGACY_KERAS")


class SecondClusterRefused(ConfigError):
    """This process already connected to a parameter-server cluster; a second one needs ``force``."""


@dataclass
class _Joined:
    chief_address: str
    #: The values JOIN_VARIABLES had before (None: unset), restored when the cluster stops.
    saved: dict[str, str | None]


_joined: _Joined | None = None
#: The chief address of every cluster this process was handed (the first one's server may still listen).
_history: list[str] = []


def strategies_made() -> int:
    """How many ParameterServerStrategy objects this process made (each one connected it to a cluster)."""
    from mwnotebook.processes.runtime import ps_guard

    return ps_guard.strategies_made()


def refusal(force: bool) -> SecondClusterRefused | None:
    """The error a new notebook-coordinator cluster gets now (None: it may start)."""
    if force or strategies_made() == 0:
        return None
    old = _history[-1] if _history else "an earlier cluster"
    return SecondClusterRefused(
        "this kernel already connected to a parameter-server cluster as its coordinator (its chief server "
        f"at {old}), and a process can safely do that only once: TensorFlow keeps the first connection's "
        "gRPC server listening until the kernel ends, the first cluster's variables become invalid, and "
        "touching its old strategy or ClusterCoordinator afterwards crashed the whole process in our "
        "measurements (here: this kernel, with your work). Restart the kernel first, or use the default "
        "--coordinator kernel (a coordinator kernel of its own can be replaced any time). --force starts "
        "it anyway: do not touch any object of the first cluster afterwards")


def join(tf_config_json: str, chief_address: str, legacy_keras: bool) -> None:
    """Give this process the chief's variables (after the servers serve)."""
    global _joined
    from mwnotebook.processes.runtime import ps_guard
    from mwnotebook.worker import _ps

    saved = {name: os.environ.get(name) for name in JOIN_VARIABLES}
    if _joined is not None:  # a forced second cluster: keep what was there before the first
        saved = _joined.saved
    ps_guard.install()  # a stock MultiWorkerMirroredStrategy here gets the message that explains why
    # TensorFlow's logger is at INFO in an interactive kernel: every fit would print lines per closure
    # ("Waiting for all global closures to be finished"), which a coordinator kernel never shows.
    patch_when_imported("tensorflow", _script_level_logs)
    if strategies_made():  # forced: the next mw.ps_strategy() connects to the new cluster
        ps_guard.forget_strategies()
        _ps.forget()
    os.environ["TF_CONFIG"] = tf_config_json
    os.environ["GRPC_FAIL_FAST"] = "use_caller"  # else a lost worker server is never reported
    if legacy_keras:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    _joined = _Joined(chief_address, saved)
    _history.append(chief_address)
    log.info("this process is the coordinator of the cluster whose chief is %s", chief_address)


def _script_level_logs(tensorflow: ModuleType) -> None:
    """The level a script's TensorFlow logs at (``tf.get_logger().setLevel("INFO")`` brings INFO back)."""
    get_logger = getattr(tensorflow, "get_logger", None)
    if callable(get_logger):
        get_logger().setLevel(logging.WARNING)


def leave() -> None:
    """The cluster stopped: restore the variables (the in-process gRPC server, if made, stays)."""
    global _joined
    if _joined is None:
        return
    for name, value in _joined.saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _joined = None


def start_notice(chief_address: str, server_addresses: Sequence[str]) -> str:
    """What listens where, said at start: every server, and this kernel's own once it connects."""
    port = chief_address.rpartition(":")[2]
    servers = ", ".join(server_addresses)
    return (f"mwnotebook: this notebook kernel (pid {os.getpid()}) is the coordinator of a parameter-server "
            f"cluster: run strategy = mw.ps_strategy() here (import mwnotebook.worker as mw). Listening "
            f"WITHOUT authentication on all interfaces of this machine (host network): the servers at "
            f"{servers}, and, once this kernel connects, its own gRPC server on port {port}. Anyone who can "
            "reach these ports can run TensorFlow operations in these processes: use this only on a trusted "
            "machine and network. %mwcluster stop ends the servers, but not this kernel's own gRPC server: "
            "TensorFlow cannot stop it; it listens until the kernel ends. One such cluster per kernel.")


def notice_for(layout: RoleLayout, addresses: Sequence[str]) -> str:
    """:func:`start_notice` of a started cluster of ``layout`` (addresses in training-task order)."""
    chief = layout.address_of(addresses, layout.cell_tasks()[0])
    return start_notice(chief, [f"{t.name} {layout.address_of(addresses, t)}" for t in layout.server_tasks()])


NO_CELLS = ("this cluster runs no cell: with --coordinator notebook no kernel runs cells, the notebook is the "
            "coordinator. Run your code in this kernel with strategy = mw.ps_strategy() "
            "(import mwnotebook.worker as mw)")
NO_RESTART = ("a --coordinator notebook cluster cannot be restarted: this kernel's strategy is bound to the "
              "servers it connected to, and it cannot connect again safely. %mwcluster stop, restart the "
              "kernel, then start again")

STOP_NOTE = ("mwnotebook: the servers are stopped. This kernel's own gRPC server (the coordinator's, started "
             "when it connected) cannot be stopped: it listens until the kernel restarts, and the "
             "strategy's objects are no longer usable.")


def stop_note() -> str:
    """What %mwcluster stop says after a notebook-coordinator cluster (empty: the kernel never connected)."""
    return STOP_NOTE if strategies_made() else "mwnotebook: the servers are stopped."
