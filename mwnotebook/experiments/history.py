"""The run history of one notebook kernel: every ``%%mwtrain`` run, failed ones too.

A :class:`RunRecord` says what ran (the magic line, the cell and its hash), when and where (start,
duration, workers, hosts), how it ended (outcome, restarts) and what it measured last (the final
value of every metric per worker and global). The metric records themselves are kept beside it
(:meth:`RunHistory.metrics`), so a run can be sent to TensorBoard or MLflow again later.

:class:`RunHistory` keeps the records in memory and, when given a :class:`~mwnotebook.experiments.store.RunStore`,
in a small directory beside the kernel's runtime state, so a restarted kernel lists the runs of its
session again. Nothing here imports TensorFlow, IPython or the engine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mwnotebook.experiments.store import RunStore
from mwnotebook.shared.metrics import GLOBAL_PREFIX, META_KEYS, as_float

log = logging.getLogger(__name__)

Outcome = Literal["ok", "failed", "interrupted"]
#: The key of the global series in :attr:`RunRecord.final` (the workers' keys are their indexes).
GLOBAL = "global"


def cell_hash(cell: str) -> str:
    """A stable hash of the cell's text: the same text gives the same hash in every kernel and
    session (line endings and trailing blank space do not count)."""
    text = "\n".join(line.rstrip() for line in cell.replace("\r\n", "\n").split("\n")).strip("\n")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class RunRecord:
    """One ``%%mwtrain`` run as the history keeps it (JSON-able through :meth:`to_json`)."""

    number: int
    #: The magic's options as typed (``--workers 2 --tensorboard tb``).
    line: str
    cell_hash: str
    cell: str
    #: Start, seconds since the epoch.
    started: float
    #: Seconds from the cell's start to its end (restarts included).
    duration: float
    workers: int
    hosts: tuple[str, ...]
    outcome: Outcome
    #: Why it failed, one line ("" when it did not).
    error: str = ""
    #: The last value of every metric: per worker (``"0"``, ``"1"``, ...) and :data:`GLOBAL`.
    final: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: How many times the cell was restarted on fresh workers (``--max-restarts``).
    restarts: int = 0
    #: An opaque JSON-able snapshot the live chart gave at the end of the run (stored as is).
    chart: dict[str, Any] | None = None
    #: Where the run was logged: ``{"tensorboard": DIR/run folder, "mlflow": run id}``.
    logged: Mapping[str, str] = field(default_factory=dict)
    #: What was not recorded and why, one line each.
    not_logged: tuple[str, ...] = ()
    #: The options the magic line set, by name (``{"workers": "2", "tensorboard": "tb"}``): what
    #: ``%mwruns --diff`` compares and MLflow's parameters.
    options: Mapping[str, str] = field(default_factory=dict)
    #: Every task's TF_CONFIG as the run's cluster had them: ``{"name", "host", "tf_config"}`` each.
    tasks: tuple[Mapping[str, str], ...] = ()
    #: The front end's id of the notebook cell that ran it (JupyterLab and Notebook 7 send one with
    #: every execution; None where none was sent, e.g. nbclient): an edited cell keeps its id.
    cell_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        document = dataclasses.asdict(self)
        document["hosts"] = list(self.hosts)
        document["not_logged"] = list(self.not_logged)
        document["tasks"] = [dict(t) for t in self.tasks]
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RunRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in document.items() if k in names}
        values["hosts"] = tuple(values.get("hosts", ()))
        values["not_logged"] = tuple(values.get("not_logged", ()))
        values["tasks"] = tuple(values.get("tasks", ()))
        return cls(**values)

    @property
    def short_hash(self) -> str:
        return self.cell_hash[:8]


def final_values(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """The last value of every metric in ``records``: per worker (local names) and global
    (``global_<name>`` under :data:`GLOBAL` as ``<name>``). Epoch summaries and step records alike,
    in arrival order: the last one reported wins."""
    final: dict[str, dict[str, float]] = {}
    for record in records:
        worker = record.get("worker")
        for key, value in record.items():
            number = as_float(value)
            if key in META_KEYS or number is None:
                continue
            if key.startswith(GLOBAL_PREFIX):
                final.setdefault(GLOBAL, {})[key[len(GLOBAL_PREFIX):]] = number
            elif worker is not None:
                final.setdefault(str(worker), {})[key] = number
    return final


class RunHistory:
    """Every run of this kernel, oldest first; with a store, also on disk (see the module docstring)."""

    def __init__(self, store: RunStore | None = None) -> None:
        self.store = store
        self._records: list[RunRecord] = []
        self._metrics: dict[int, list[dict[str, Any]]] = {}
        if store is not None:
            for document in store.load():
                try:
                    self._records.append(RunRecord.from_json(document))
                except (TypeError, ValueError) as exc:
                    log.warning("mwnotebook: a run in %s is skipped: %s", store.index, exc)

    def add(self, record: RunRecord, metrics: Sequence[Mapping[str, Any]] = ()) -> RunRecord:
        """Keep ``record`` (and its metric records); a record with the number of a kept one replaces it."""
        rows = [dict(r) for r in metrics]
        self._records = [r for r in self._records if r.number != record.number] + [record]
        self._records.sort(key=lambda r: r.number)
        self._metrics[record.number] = rows
        if self.store is not None:
            try:
                self.store.save(record.number, record.to_json(), rows)
            except OSError as exc:
                log.warning("mwnotebook: run %d is kept in memory only: %s", record.number, exc)
        return record

    def next_number(self) -> int:
        return self._records[-1].number + 1 if self._records else 1

    def record(self, *, line: str, cell: str, started: float, workers: int, hosts: Sequence[str] = (),
               outcome: Outcome = "ok", error: str = "", metrics: Sequence[Mapping[str, Any]] = (),
               restarts: int = 0, chart: dict[str, Any] | None = None, duration: float | None = None,
               options: Mapping[str, str] | None = None,
               tasks: Sequence[Mapping[str, str]] = (), cell_id: str | None = None) -> RunRecord:
        """Keep one finished run: the one call ``%%mwtrain`` makes at the end of every run.

        ``metrics``: every record the workers reported (each with its ``worker``); ``chart``: the
        live chart's snapshot, stored as is."""
        record = RunRecord(
            number=self.next_number(), line=line, cell_hash=cell_hash(cell), cell=cell, started=started,
            duration=time.time() - started if duration is None else duration, workers=workers,
            hosts=tuple(hosts), outcome=outcome, error=error, final=final_values(metrics),
            restarts=restarts, chart=chart, options=dict(options or {}), tasks=tuple(dict(t) for t in tasks),
            cell_id=cell_id)
        return self.add(record, metrics)

    def update(self, number: int, **changes: Any) -> RunRecord:
        """The kept run ``number`` with ``changes`` (e.g. where it was logged), kept in its place."""
        record = dataclasses.replace(self.get(number), **changes)
        self._records = [record if r.number == number else r for r in self._records]
        if self.store is not None:
            try:
                self.store.save(number, record.to_json(), None)
            except OSError as exc:
                log.warning("mwnotebook: the change to run %d is kept in memory only: %s", number, exc)
        return record

    def records(self) -> list[RunRecord]:
        """Every kept run, oldest first."""
        return list(self._records)

    def get(self, number: int) -> RunRecord:
        for record in self._records:
            if record.number == number:
                return record
        known = ", ".join(str(r.number) for r in self._records) or "none yet"
        raise KeyError(f"no run {number} in this kernel's history (runs: {known})")

    def metrics(self, number: int) -> list[dict[str, Any]]:
        """The metric records of run ``number`` (read from the store after a kernel restart)."""
        self.get(number)
        rows = self._metrics.get(number)
        if rows is None:
            rows = self.store.load_metrics(number) if self.store is not None else []
            self._metrics[number] = rows
        return [dict(r) for r in rows]

    def earlier_runs(self, cell_hash: str, limit: int, cell_id: str | None = None) -> list[RunRecord]:
        """The last ``limit`` runs of the same cell, latest first: the runs of the notebook cell with
        this front-end ``cell_id`` (its text edited in between, e.g. a new learning rate), and the runs
        of this very text wherever it ran (a kernel without cell ids, such as nbclient's)."""
        same = [r for r in reversed(self._records)
                if r.cell_hash == cell_hash or (cell_id is not None and r.cell_id == cell_id)]
        return same[:max(0, limit)]

    def __len__(self) -> int:
        return len(self._records)
