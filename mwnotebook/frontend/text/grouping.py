"""Which workers' outputs are the same, and the label that names them (pure, no I/O).

Two outputs are "the same" when their data are equal once memory addresses (``at 0x7f...``, which
differ between processes for one and the same object) are masked: the ``History`` of every
worker's ``fit``, the same figure's PNG bytes, the same HTML table. Only the data count, not the
metadata. Keys are hashed, so a cell full of figures does not keep every image twice.

* :func:`grouped_results`: the cell's ``execute_result`` outputs, all known at the end of the
  cell, grouped in one go.
* :class:`DisplayGroups`: rich displays, which are shown as they come; each new one either opens a
  group or joins the first group of identical ones that this worker is not in yet, so the k-th
  identical figure of one worker is matched with the k-th of the others.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
Result = tuple[int, dict[str, Any], dict[str, Any]]  # (worker, data, metadata) of an execute_result


#: What each kernel of a cell is called when it is not a plain replica: ``{index: "evaluator"}``, a
#: --ps cluster's ``{0: "coordinator"}`` (config/roles.py ``RoleLayout.kernel_names``). Whoever runs
#: the cell (the magic, the command line) passes it down; empty: every kernel is ``worker i``.
WorkerNames = Mapping[int, str]
NO_NAMES: WorkerNames = MappingProxyType({})


def worker_label(worker: int, names: WorkerNames = NO_NAMES) -> str:
    """``[worker i] ``, or ``[evaluator] `` / ``[coordinator] `` for a kernel ``names`` names."""
    name = names.get(worker)
    return f"[{name}] " if name else f"[worker {worker}] "


def workers_label(workers: list[int], total: int, names: WorkerNames = NO_NAMES) -> str:
    """``[all N workers] `` when all ``total`` workers agree, else the workers named."""
    if len(workers) == total and total > 1:
        return f"[all {total} workers] "
    if len(workers) == 1:
        return worker_label(workers[0], names)
    return f"[workers {', '.join(map(str, sorted(workers)))}] "


def same_key(data: dict[str, Any]) -> str:
    """What makes two outputs 'the same': their data, memory addresses masked (a digest)."""
    normal = {k: _ADDRESS.sub(" at 0x...", v) if isinstance(v, str) else v for k, v in data.items()}
    return hashlib.sha256(json.dumps(normal, sort_keys=True, default=str).encode()).hexdigest()


def with_plain_label(data: dict[str, Any], label: str) -> dict[str, Any]:
    """A copy of ``data`` whose ``text/plain`` (if any) starts with ``label``."""
    data = dict(data)
    if "text/plain" in data:
        data["text/plain"] = label + str(data["text/plain"])
    return data


@dataclass(frozen=True)
class Grouped:
    """Identical outputs of some workers: shown once with ``label`` (data and metadata unchanged)."""

    workers: tuple[int, ...]
    label: str
    data: dict[str, Any]
    metadata: dict[str, Any]


def grouped_results(results: list[Result], total: int, names: WorkerNames = NO_NAMES) -> list[Grouped]:
    """The cell's ``execute_result`` outputs, identical ones once, each with the label of its
    workers (``[all N workers]`` when all agree), in the order of their first worker."""
    groups: dict[str, list[Result]] = {}
    for item in sorted(results, key=lambda r: r[0]):
        groups.setdefault(same_key(item[1]), []).append(item)
    shown = []
    for members in groups.values():
        workers = [w for w, _, _ in members]
        _, data, metadata = members[0]
        shown.append(Grouped(tuple(workers), workers_label(workers, total, names), dict(data), dict(metadata)))
    return shown


class DisplayGroups:
    """Matches rich displays of different workers as they arrive (see the module docstring)."""

    def __init__(self, total: int, names: WorkerNames = NO_NAMES) -> None:
        self.total = total
        self.names = names
        self._members: list[list[int]] = []
        self._by_key: dict[str, list[int]] = {}  # key -> its groups, oldest first

    def add(self, worker: int, data: dict[str, Any]) -> tuple[int, bool]:
        """Place ``worker``'s display: ``(group, is_new)``; a new group is to be shown, a joined one
        only relabelled."""
        groups = self._by_key.setdefault(same_key(data), [])
        for group in groups:
            if worker not in self._members[group]:
                self._members[group].append(worker)
                return group, False
        self._members.append([worker])
        groups.append(len(self._members) - 1)
        return len(self._members) - 1, True

    def first(self, group: int) -> int:
        """The worker whose display opened ``group`` (the one shown)."""
        return self._members[group][0]

    def workers(self, group: int) -> list[int]:
        return sorted(self._members[group])

    def label(self, group: int) -> str:
        return workers_label(self._members[group], self.total, self.names)
