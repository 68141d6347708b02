"""Which nodes of a Slurm allocation can still run workers, and where lost workers go: pure
functions, unit-tested in ``tests/unit/test_slurm_nodes.py``. The launcher
(``launchers/slurm/launcher.py``) runs the commands and acts on the plan.

Why it works this way:

* An allocation made with ``salloc --no-kill`` (mwnotebook's own always is) keeps running when one
  of its nodes fails: Slurm removes the node from the job (squeue's node list shrinks) instead of
  ending the job. Without ``--no-kill`` the whole job ends.
* A *spare* node is a node of the allocation that runs no worker. Slurm gives one only when asked for
  more nodes than workers (``--slurm "-N 3"`` for 2 workers); so mwnotebook asks salloc for at least
  as many tasks as nodes (:func:`asked_nodes`), else salloc would shrink ``-N 3`` to the task count.
* Workers of a lost node all move to one spare node (the same number of workers per node as before).
  With ``--ps``, ``--chief`` or ``--evaluator`` every task placed on the node moves the same way
  (the launcher passes each task's node and name: ``node mwnode1 lost; worker-1, ps-0 restarted on
  node mwnode2``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: ``scontrol show node`` state flags that mean a node cannot run (new) job steps.
UNUSABLE_FLAGS = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWER", "REBOOT", "FUTURE")

_NODES_OPTION = re.compile(r"^(?:-N|--nodes)(?:=?)(.*)$")


def asked_nodes(args: Sequence[str]) -> int | None:
    """The (largest) node count the user's salloc arguments ask for (``-N 3``, ``-N2-4``,
    ``--nodes=3``), or None when they ask for none."""
    found: int | None = None
    for i, arg in enumerate(args):
        match = _NODES_OPTION.match(arg)
        if not match:
            continue
        value = match.group(1) or (args[i + 1] if i + 1 < len(args) else "")
        top = value.split("-")[-1].split(":")[0]
        if top.isdigit():
            found = int(top)
    return found


def parse_node_states(output: str) -> dict[str, str]:
    """``{NodeName: State}`` from ``scontrol --oneliner show node ...``."""
    states: dict[str, str] = {}
    for line in output.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "NodeName" in fields:
            states[fields["NodeName"]] = fields.get("State", "")
    return states


def usable(state: str) -> bool:
    """True when a node in this ``scontrol`` state (``IDLE``, ``MIXED+DRAIN``, ``DOWN*``) can run steps."""
    flags = re.split(r"[+*]", state.upper())
    return bool(state) and not any(flag in UNUSABLE_FLAGS for flag in flags)


@dataclass(frozen=True)
class Move:
    """The workers of a lost node and the spare node they restart on."""

    lost: str
    workers: tuple[int, ...]
    spare: str
    #: The moved tasks' names (``ps-0``), when they are not all plain workers; else the line counts workers.
    names: tuple[str, ...] = ()

    def line(self) -> str:
        """``node mwnode1 lost; worker 1 restarted on node mwnode2`` (with names: ``...; worker-1, ps-0 ...``)."""
        if self.names:
            who = ", ".join(self.names)
        else:
            who = ("worker " if len(self.workers) == 1 else "workers ") + ", ".join(map(str, self.workers))
        return f"node {self.lost} lost; {who} restarted on node {self.spare}"


@dataclass(frozen=True)
class Replacement:
    """What :func:`replace_lost` decided: the new placement and the moves, or the lost nodes that
    have no spare (``placement`` then is None)."""

    placement: list[str] | None
    moves: tuple[Move, ...] = ()
    unplaced: tuple[str, ...] = ()


def replace_lost(placement: Sequence[str], healthy: Sequence[str],
                 names: Sequence[str] | None = None) -> Replacement:
    """Move the workers of every node not in ``healthy`` (the allocation's usable nodes, in order)
    to a healthy node that runs no worker. ``placement[i]`` is worker ``i``'s node (or task ``i``'s,
    named ``names[i]`` in the moves' lines)."""
    used = set(placement)
    spares = [node for node in healthy if node not in used]
    new = list(placement)
    moves: list[Move] = []
    unplaced: list[str] = []
    for lost in dict.fromkeys(node for node in placement if node not in healthy):
        workers = tuple(i for i, node in enumerate(placement) if node == lost)
        if not spares:
            unplaced.append(lost)
            continue
        spare = spares.pop(0)
        for i in workers:
            new[i] = spare
        moves.append(Move(lost, workers, spare, tuple(names[i] for i in workers) if names else ()))
    if unplaced:
        return Replacement(None, tuple(moves), tuple(unplaced))
    return Replacement(new, tuple(moves))
