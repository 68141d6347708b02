"""What ``Cluster.status()`` reports: one entry per TensorFlow task of the cluster.

The kernels that run the cell come first, in cell order, so entry ``i`` is the kernel whose output
is labelled ``[i]`` (a plain cluster reports exactly these). A ``--ps`` cluster's worker and ps
servers (engine/roles/task_servers.py) follow: they run no cell, but a user checking the cluster wants
to see every process it is made of, where it listens and whether it is alive.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mwnotebook.config.roles import RoleLayout, Task
from mwnotebook.engine.roles.task_servers import TaskServers
from mwnotebook.engine.workers.worker import Worker


@dataclass(frozen=True)
class WorkerInfo:
    """One task of a cluster as the status shows it.

    ``index`` is the entry's position in ``Cluster.status()``: below the number of kernels that
    run the cell it is that kernel's index; a ``--ps`` cluster's servers come after them
    (``runs_cell`` False). ``task`` is TF_CONFIG's task as ``type:index``; ``role`` says what it is
    for (``worker``; ``chief``; ``coordinator``, ``worker server``, ``parameter server``;
    ``evaluator``); ``address`` is its TensorFlow server address ("" for the evaluator, which is
    not in the training cluster, and before a start); ``restarts`` counts the times a lost worker
    server was started again on its address; ``note`` says why a task is in its state where the
    state alone does not (a worker server not back after its node failed). ``on_this_machine``
    is what the task's kernel handle states (launchers/base.py ``KernelHandle.on_this_machine``):
    whether ``pid`` is a process of this machine.
    """

    index: int
    host: str
    pid: int | None
    state: str
    alive: bool
    tf_config: dict[str, Any]
    role: str = "worker"
    task: str = ""
    address: str = ""
    runs_cell: bool = True
    restarts: int = 0
    note: str = ""
    on_this_machine: bool = False


def task_text(task: Task) -> str:
    return f"{task.type}:{task.index}"


async def cluster_status(layout: RoleLayout, addresses: Sequence[str], states: Sequence[str],
                         workers: Sequence[Worker], servers: TaskServers | None, *,
                         coordinator_here: bool = False) -> list[WorkerInfo]:
    """Every task's entry: the cell kernels (``states[i]``, ``workers[i]``), then the servers.

    ``coordinator_here`` (``--coordinator notebook``): the coordinator is this process, not a kernel;
    its entry says so (pid of this process, state ``notebook``) and runs no cell."""
    infos = []
    if coordinator_here:
        chief = layout.cell_tasks()[0]
        infos.append(WorkerInfo(
            index=0, host="this notebook", pid=os.getpid(), state="notebook", alive=True,
            tf_config=layout.tf_config(addresses, chief) if addresses else {}, role="coordinator (notebook)",
            task=task_text(chief), address=layout.address_of(addresses, chief), runs_cell=False,
            on_this_machine=True))
    for i, task in enumerate(() if coordinator_here else layout.cell_tasks()):
        worker = workers[i] if i < len(workers) else None
        alive = worker is not None and await worker.handle.is_alive()
        infos.append(WorkerInfo(
            index=i, host=worker.handle.host if worker else "", pid=worker.handle.pid if worker else None,
            state=states[i], alive=alive, tf_config=layout.tf_config(addresses, task) if addresses else {},
            role=layout.role_label(task), task=task_text(task), address=layout.address_of(addresses, task),
            on_this_machine=worker.handle.on_this_machine if worker else False))
    for task in layout.server_tasks():
        server = servers.server(task) if servers is not None else None
        alive = server is not None and await server.handle.is_alive()
        infos.append(WorkerInfo(
            index=len(infos), host=server.handle.host if server else "",
            pid=server.handle.pid if server else None,
            state=servers.states.get(task, "stopped") if servers is not None else "stopped", alive=alive,
            tf_config=layout.tf_config(addresses, task) if addresses else {}, role=layout.role_label(task),
            task=task_text(task), address=layout.address_of(addresses, task), runs_cell=False,
            restarts=servers.restarts_of.get(task, 0) if servers is not None else 0,
            note=servers.notes.get(task, "") if servers is not None else "",
            on_this_machine=server.handle.on_this_machine if server else False))
    return infos
