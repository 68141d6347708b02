"""Which TensorFlow tasks a cluster has: their types, indexes, order, and each one's ``TF_CONFIG``.

Pure (no processes, no TensorFlow). TensorFlow's distributed training knows four task types:

- ``worker``: a replica of ``MultiWorkerMirroredStrategy``, or under ``ParameterServerStrategy`` a
  server that only runs the steps the coordinator schedules on it;
- ``chief``: under MWMS an ordinary replica that is replica 0 and the one that saves
  (``--chief``); under ``ParameterServerStrategy`` the coordinator, the one process that runs the
  user's program;
- ``ps``: a parameter server, which holds the variables and runs no user code;
- ``evaluator``: a process that evaluates checkpoints beside training. It is never listed in the
  training cluster: a coordinator that finds it there waits for it forever.

Addresses are handed out in :meth:`RoleLayout.training_tasks` order: the chief first, then the
workers, then the parameter servers. The kernels that run the cell (:meth:`RoleLayout.cell_tasks`)
come first in that order, so "replica i" and "address i" agree for MWMS.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TASK_TYPES = ("chief", "worker", "ps", "evaluator")


@dataclass(frozen=True, order=True)
class Task:
    """One TensorFlow task: ``Task("ps", 0)`` is ``ps-0``."""

    type: str
    index: int

    @property
    def name(self) -> str:
        return f"{self.type}-{self.index}"


@dataclass(frozen=True)
class RoleLayout:
    """The task layout of one cluster, from the options ``--workers``, ``--chief``, ``--ps``, ``--evaluator``.

    ``workers`` is ``--workers``: with ``chief`` (MWMS) it counts every replica, the chief among them
    (``--workers 2 --chief`` is ``chief-0`` + ``worker-0``); with ``ps`` it counts the worker servers
    only (the coordinator comes on top).
    """

    workers: int
    ps: int = 0
    chief: bool = False
    evaluator: bool = False

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"a cluster needs at least one worker, got {self.workers}")
        if self.ps < 0:
            raise ValueError(f"ps must be >= 0, got {self.ps}")

    @property
    def parameter_server(self) -> bool:
        """True for a ``ParameterServerStrategy`` cluster (a coordinator, worker and ps servers)."""
        return self.ps > 0

    def training_tasks(self) -> tuple[Task, ...]:
        """Every task in the training cluster, in address order (the evaluator is not one)."""
        if self.parameter_server:
            return (Task("chief", 0), *(Task("worker", i) for i in range(self.workers)),
                    *(Task("ps", j) for j in range(self.ps)))
        if self.chief:
            return (Task("chief", 0), *(Task("worker", i) for i in range(self.workers - 1)))
        return tuple(Task("worker", i) for i in range(self.workers))

    def cell_tasks(self) -> tuple[Task, ...]:
        """The tasks whose kernels run the user's cell: the coordinator alone, or every replica; then
        the evaluator (its kernel runs the cell too, beside training: the cell branches on the task type)."""
        training = (Task("chief", 0),) if self.parameter_server else self.training_tasks()
        return (*training, Task("evaluator", 0)) if self.evaluator else training

    def kernel_names(self) -> dict[int, str]:
        """Labels for cell kernels that are not plain replicas: ``{index: "evaluator" | "coordinator"}``."""
        names = {}
        for i, task in enumerate(self.cell_tasks()):
            if task.type == "evaluator":
                names[i] = "evaluator"
            elif self.parameter_server and task.type == "chief":
                names[i] = "coordinator"
        return names

    def server_tasks(self) -> tuple[Task, ...]:
        """The tasks that only run a TensorFlow server (``ParameterServerStrategy``'s workers and ps)."""
        return self.training_tasks()[1:] if self.parameter_server else ()

    def cluster(self, addresses: Sequence[str]) -> dict[str, list[str]]:
        """TF_CONFIG's ``cluster``: ``{"chief": [...], "worker": [...], "ps": [...]}`` (types present only)."""
        tasks = self.training_tasks()
        if len(addresses) != len(tasks):
            raise ValueError(f"{len(addresses)} addresses for {len(tasks)} tasks "
                             f"({', '.join(t.name for t in tasks)}): give one per task")
        out: dict[str, list[str]] = {}
        for task, address in zip(tasks, addresses):
            out.setdefault(task.type, []).append(address)
        return out

    def tf_config(self, addresses: Sequence[str], task: Task) -> dict[str, Any]:
        """TF_CONFIG of ``task``. The evaluator's names only itself, never the training cluster's tasks."""
        if task.type == "evaluator":
            if not self.evaluator:
                raise ValueError("this layout has no evaluator")
            return {"cluster": {"evaluator": ["localhost:0"]}, "task": {"type": "evaluator", "index": 0}}
        if task not in self.training_tasks():
            raise ValueError(f"{task.name} is not a task of this cluster "
                             f"({', '.join(t.name for t in self.training_tasks())})")
        return {"cluster": self.cluster(addresses), "task": {"type": task.type, "index": task.index}}

    def tf_config_json(self, addresses: Sequence[str], task: Task) -> str:
        return json.dumps(self.tf_config(addresses, task), separators=(",", ":"))

    def role_label(self, task: Task) -> str:
        """What ``task`` is for, in the status view's words: ``coordinator``, ``worker server``,
        ``parameter server`` (a --ps cluster); ``chief``, ``worker`` (MWMS); ``evaluator``."""
        if task.type == "evaluator":
            return "evaluator"
        if self.parameter_server:
            return {"chief": "coordinator", "worker": "worker server", "ps": "parameter server"}[task.type]
        return task.type

    def address_of(self, addresses: Sequence[str], task: Task) -> str:
        """``task``'s TensorFlow address ("" for the evaluator, which is not in the training cluster)."""
        tasks = self.training_tasks()
        if task not in tasks or len(addresses) != len(tasks):
            return ""
        return addresses[tasks.index(task)]

    def replica_task(self, replica: int) -> Task:
        """The task of MWMS replica ``replica`` (with ``--chief``, replica 0 is ``chief-0``)."""
        tasks = tuple(t for t in self.cell_tasks() if t.type != "evaluator")
        if not 0 <= replica < len(tasks):
            raise ValueError(f"replica {replica} is outside 0..{len(tasks) - 1}")
        return tasks[replica]

