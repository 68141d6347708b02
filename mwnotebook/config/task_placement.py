"""Which host (or node) runs each TensorFlow task of a cluster, and which launch slot starts it. Pure.

A cluster on several machines (``--hosts``, ``--slurm``) places every task of its
:class:`~mwnotebook.config.roles.RoleLayout` (training tasks and the evaluator) on one of them. The
rule, decided here once and handed to the launcher (:class:`TaskPlacement`):

- MultiWorkerMirroredStrategy: the replicas (the ``--chief`` one included) take the worker slots in
  order, as ``--hosts a*2,b*2`` lists them;
- ``--ps``: the ``--workers`` worker servers take the worker slots in order; the coordinator
  (``chief-0``) goes on the first host; parameter server ``j`` on the ``j``-th host counted from
  the **last** one backwards, round-robin (with two hosts the ps is not beside the coordinator);
- the evaluator goes on the last host.

``--place ROLE=HOST[,HOST...]`` (repeatable; ROLE one of :data:`PLACE_ROLES`) overrides that for a
role: its tasks take those hosts round-robin. A host is a key the launcher knows: for SSH a
``--hosts`` entry or another host in its syntax (config/hosts.py resolves it), for Slurm a node name.

Launch slots: a launcher's ``start(index, env)`` (launchers/base.py) gets the task's slot, so a
launcher that places tasks knows which one it starts: the kernels that run the cell are
``0..k-1`` in :meth:`RoleLayout.cell_tasks` order, a ``--ps`` cluster's servers
``SERVER_SLOT_BASE + i`` in :meth:`RoleLayout.server_tasks` order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mwnotebook.config.roles import RoleLayout, Task
from mwnotebook.errors import ConfigError

__all__ = ["PLACE_ROLES", "SERVER_SLOT_BASE", "TaskPlacement", "check_place", "launch_slots", "parse_place",
           "place_tasks", "placed_by_option"]

#: The roles ``--place`` can move (the worker replicas and worker servers follow ``--hosts``).
PLACE_ROLES = ("coordinator", "chief", "ps", "evaluator")

#: Launch slots of a ``--ps`` cluster's servers start here, apart from the cell kernels' ``0..k-1``.
SERVER_SLOT_BASE = 100


def launch_slots(layout: RoleLayout) -> dict[Task, int]:
    """Every task's launch slot: cell kernels ``0..k-1`` in cell order, then the servers from
    :data:`SERVER_SLOT_BASE`."""
    slots = {task: i for i, task in enumerate(layout.cell_tasks())}
    slots.update({task: SERVER_SLOT_BASE + i for i, task in enumerate(layout.server_tasks())})
    return slots


@dataclass(frozen=True)
class TaskPlacement:
    """Each task's host, for one layout. ``hosts`` holds every task of the layout (the evaluator too)."""

    layout: RoleLayout
    hosts: Mapping[Task, str]

    def host_of(self, task: Task) -> str:
        return self.hosts[task]

    def address_hosts(self) -> tuple[str, ...]:
        """The host of each training task, in address order (:meth:`RoleLayout.training_tasks`)."""
        return tuple(self.hosts[task] for task in self.layout.training_tasks())

    def task_at(self, slot: int) -> Task:
        """The task launch slot ``slot`` starts; :class:`ConfigError` for a slot of no task."""
        for task, number in launch_slots(self.layout).items():
            if number == slot:
                return task
        raise ConfigError(f"launch slot {slot} is no task of this cluster "
                          f"({', '.join(t.name for t in launch_slots(self.layout))})")

    def host_of_slot(self, slot: int) -> str:
        return self.hosts[self.task_at(slot)]

    def distinct_hosts(self) -> tuple[str, ...]:
        """Every host that runs a task, in address order, then the evaluator's."""
        tasks = [*self.layout.training_tasks(), *self.layout.cell_tasks()]
        return tuple(dict.fromkeys(self.hosts[task] for task in tasks))

    def rows(self) -> list[tuple[str, str]]:
        """``(task name, host)`` for every task, training tasks first: what a user is shown."""
        tasks = [*self.layout.training_tasks(), *(t for t in self.layout.cell_tasks() if t.type == "evaluator")]
        return [(task.name, self.hosts[task]) for task in tasks]


def parse_place(values: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``--place ROLE=HOST[,HOST...]`` options (repeatable) into ``{role: hosts}``; ConfigError naming
    a malformed one, an unknown role or a role given twice."""
    out: dict[str, tuple[str, ...]] = {}
    for value in values:
        role, sep, rest = value.partition("=")
        role = role.strip()
        hosts = tuple(h.strip() for h in rest.split(",") if h.strip())
        if not sep or not role or not hosts:
            raise ConfigError(f"--place {value!r}: write ROLE=HOST[,HOST...], e.g. --place ps=gpu3")
        if role not in PLACE_ROLES:
            raise ConfigError(f"--place {value!r}: {role!r} is not a role --place can move; use one of "
                              f"{', '.join(PLACE_ROLES)} (the workers follow --hosts)")
        if role in out:
            raise ConfigError(f"--place {role}=... is given twice; list every host of that role in one "
                              f"option: --place {role}={','.join(out[role] + hosts)}")
        out[role] = hosts
    return out


def check_place(layout: RoleLayout, overrides: Mapping[str, Sequence[str]]) -> None:
    """ConfigError for a ``--place`` role the cluster does not have (or an empty host list)."""
    needs = {
        "coordinator": (layout.parameter_server, "--ps P (the coordinator of a parameter-server "
                                                 "cluster; for --chief write chief=HOST)"),
        "chief": (layout.parameter_server or layout.chief, "--chief or --ps P"),
        "ps": (layout.parameter_server, "--ps P"),
        "evaluator": (layout.evaluator, "--evaluator"),
    }
    for role, hosts in overrides.items():
        if role not in needs:
            raise ConfigError(f"--place {role}=...: use one of {', '.join(PLACE_ROLES)}")
        if not hosts:
            raise ConfigError(f"--place {role}= names no host: write --place {role}=HOST[,HOST...]")
        present, option = needs[role]
        if not present:
            raise ConfigError(f"--place {role}=... needs {option}: this cluster has no {role}. "
                              "Remove the --place option or add the role")
    if "coordinator" in overrides and "chief" in overrides:
        raise ConfigError("--place coordinator=... and --place chief=... name the same task (a --ps "
                          "cluster's coordinator is its chief): keep one")


def place_tasks(layout: RoleLayout, worker_slots: Sequence[str], hosts: Sequence[str],
                overrides: Mapping[str, Sequence[str]] | None = None) -> TaskPlacement:
    """Each task's host (module docstring: the rule). ``worker_slots``: the host of each worker slot
    (``--workers`` of them: MWMS replicas, or a ``--ps`` cluster's worker servers); ``hosts``: the
    distinct hosts in order; ``overrides``: ``--place`` as :func:`parse_place` gives it."""
    overrides = dict(overrides or {})
    check_place(layout, overrides)
    if len(worker_slots) != layout.workers:
        raise ConfigError(f"{layout.workers} workers but {len(worker_slots)} worker slots on the hosts: "
                          "give one slot per worker")
    distinct = list(dict.fromkeys(hosts)) or list(dict.fromkeys(worker_slots))
    if not distinct:
        raise ConfigError("no host to place the cluster's tasks on")
    placed: dict[Task, str] = {}
    if layout.parameter_server:
        placed[Task("chief", 0)] = distinct[0]
        for i in range(layout.workers):
            placed[Task("worker", i)] = worker_slots[i]
        for j in range(layout.ps):
            placed[Task("ps", j)] = distinct[-1 - (j % len(distinct))]
    else:
        for task, host in zip(layout.training_tasks(), worker_slots):
            placed[task] = host
    if layout.evaluator:
        placed[Task("evaluator", 0)] = distinct[-1]
    for role, role_hosts in overrides.items():
        kind = "chief" if role == "coordinator" else role
        tasks = [task for task in placed if task.type == kind]
        for n, task in enumerate(sorted(tasks)):
            placed[task] = role_hosts[n % len(role_hosts)]
    return TaskPlacement(layout, placed)


def placed_by_option(layout: RoleLayout, overrides: Mapping[str, Sequence[str]] | None) -> dict[Task, str]:
    """The tasks ``--place`` puts on named hosts and their hosts (the rule above, round-robin over a
    role's hosts, so a host a role has no task for is left out); ``{}`` without ``--place``. For a
    Slurm job, whose other tasks go where Slurm puts them (config/slurm_options.py ``place_node_args``)."""
    if not overrides:
        return {}
    placement = place_tasks(layout, [""] * layout.workers, [""], overrides)
    return {task: host for task, host in placement.hosts.items() if host}
