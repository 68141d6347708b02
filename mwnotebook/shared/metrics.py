"""Pure helpers for metric records: collect them per worker, pick series, downsample, tabulate.

A *record* is one flat dict a worker reported (see :mod:`mwnotebook.worker._report`)::

    {"worker": 0, "step": 12, "time": 1732900000.1, "loss": 0.41, "global_loss": 0.43}

Naming convention (what keeps local and global numbers apart):

* ``loss`` -- the worker's own (local) value, computed on its shard of the batch;
* ``global_loss`` -- the value over all workers (identical on every worker);
* records with ``"kind": "epoch"`` are epoch summaries; curves are drawn from step records.

Non-finite floats travel as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (JSON has no
NaN); :func:`as_float` turns them back into floats.

Nothing here imports TensorFlow, IPython or widgets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

GLOBAL_PREFIX = "global_"
#: Keys that describe a record rather than measure something.
META_KEYS = frozenset({"worker", "step", "time", "kind", "epoch", "batch"})

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def as_float(value: Any) -> float | None:
    """A plotted number from a record value (``None`` when it is not a number)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return _NONFINITE.get(value)
    return None


def encode_float(value: float) -> float | str:
    """JSON-safe form of a float: non-finite values become strings (see module docstring)."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def global_key(metric: str) -> str:
    """``loss`` -> ``global_loss``."""
    return metric if metric.startswith(GLOBAL_PREFIX) else GLOBAL_PREFIX + metric


def is_step_record(record: Mapping[str, Any]) -> bool:
    return record.get("kind", "step") in ("step", "batch")


def downsample(
    xs: Sequence[float] | np.ndarray, ys: Sequence[float] | np.ndarray, max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points of a series, keeping its shape.

    Min/max decimation: the series is cut into ``max_points // 2`` buckets and each bucket keeps
    its lowest and highest point (in step order), plus the first and last point of the series.
    Unlike striding, a loss spike never disappears from the display. ``NaN`` values are kept
    where a bucket has nothing else (they show as gaps).
    """
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    n = len(y)
    if max_points < 4:
        raise ValueError("max_points must be at least 4")
    if n <= max_points:
        return x, y
    buckets = (max_points - 2) // 2
    size = -(-n // buckets)  # ceil
    rows = -(-n // size)
    pad = rows * size - n  # < size, so every row holds at least one real point
    low = np.where(np.isnan(y), np.inf, y)
    high = np.where(np.isnan(y), -np.inf, y)
    low = np.concatenate([low, np.full(pad, np.inf)]).reshape(rows, size)
    high = np.concatenate([high, np.full(pad, -np.inf)]).reshape(rows, size)
    base = np.arange(rows) * size
    idx = np.concatenate([base + low.argmin(axis=1), base + high.argmax(axis=1), [0, n - 1]])
    idx = np.unique(idx[idx < n])
    return x[idx], y[idx]


#: ``{key: (steps, values)}`` of a batch of step records, plain floats (see :func:`step_columns`).
Columns = dict[str, tuple[list[float], list[float]]]


_PLAIN_NUMBERS = (float, int)


def step_columns(records: Sequence[Mapping[str, Any]]) -> Columns:
    """The measured keys of step records as columns: for each key, the steps and float values of
    the records that have a number for it (non-numbers left out, non-finite strings turned back)."""
    if not records:
        return {}
    raw_steps: list[Any] = [r.get("step") for r in records]
    steps = [float(s) if type(s) in _PLAIN_NUMBERS else as_float(s) for s in raw_steps]
    keys = set().union(*records) - META_KEYS
    columns: Columns = {}
    for key in keys:
        xs: list[float] = []
        ys: list[float] = []
        for step, record in zip(steps, records):
            value: Any = record.get(key)
            if type(value) not in _PLAIN_NUMBERS:
                value = as_float(value)
                if value is None:
                    continue
            if step is not None:
                xs.append(step)
                ys.append(value)
        if xs:
            columns[key] = (xs, ys)
    return columns


class _Series:
    """Append-only x/y columns; growth is amortised O(1) (numpy buffer doubling)."""

    __slots__ = ("_x", "_y", "n")

    def __init__(self) -> None:
        self._x = np.empty(64)
        self._y = np.empty(64)
        self.n = 0

    def append(self, x: float, y: float) -> None:
        if self.n == len(self._x):
            self._x = np.concatenate([self._x, np.empty(self.n)])
            self._y = np.concatenate([self._y, np.empty(self.n)])
        self._x[self.n] = x
        self._y[self.n] = y
        self.n += 1

    def extend(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        n = len(xs)
        while self.n + n > len(self._x):
            self._x = np.concatenate([self._x, np.empty(len(self._x))])
            self._y = np.concatenate([self._y, np.empty(len(self._y))])
        self._x[self.n: self.n + n] = xs
        self._y[self.n: self.n + n] = ys
        self.n += n

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x[: self.n].copy(), self._y[: self.n].copy()


class MetricsStore:
    """Every record of a run, plus per-worker and global series ready to plot.

    ``add`` is O(records); series are kept incrementally so drawing a long run stays cheap.
    A global series (``global_<metric>``) is the same on every worker, so it is taken from one
    worker only: the first worker that reported it.
    """

    def __init__(self) -> None:
        self._records: list[dict[str, Any]] = []
        self._local: dict[tuple[int, str], _Series] = {}
        self._global: dict[str, _Series] = {}
        self._global_source: dict[str, int] = {}
        self._epoch: dict[tuple[int, str], _Series] = {}  # worker -1: global

    def add(self, worker: int, records: Iterable[Mapping[str, Any]]) -> int:
        """Keep ``records`` from ``worker``; returns how many were added."""
        return len(self.add_batch(worker, records)[0])

    def add_batch(self, worker: int, records: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], Columns]:
        """Keep ``records`` from ``worker``; returns them (with ``worker``) and their step records'
        columns (see :func:`step_columns`), which the live chart reuses. Works a column at a time:
        a worker's batch holds hundreds of records of the same keys."""
        rows = []
        for raw in records:  # the worker named itself already (worker/_report.py): no copy then
            record = raw if type(raw) is dict and raw.get("worker") == worker else dict(raw, worker=worker)
            rows.append(record)
        self._records.extend(rows)
        steps = []
        for record in rows:
            kind = record.get("kind")
            if kind == "epoch":
                self._add_epoch(worker, record)
            elif kind is None or kind in ("step", "batch"):
                steps.append(record)
        columns = step_columns(steps)
        for key, (xs, ys) in columns.items():
            if key.startswith(GLOBAL_PREFIX):
                if self._global_source.setdefault(key, worker) == worker:
                    self._global.setdefault(key, _Series()).extend(xs, ys)
            else:
                self._local.setdefault((worker, key), _Series()).extend(xs, ys)
        return rows, columns

    def _add_epoch(self, worker: int, record: Mapping[str, Any]) -> None:
        """Epoch summaries, x = the epoch's number from 1 (Keras counts from 0)."""
        epoch = as_float(record.get("epoch"))
        if epoch is None:
            return
        for key, value in record.items():
            y = as_float(value)
            if key in META_KEYS or y is None:
                continue
            if key.startswith(GLOBAL_PREFIX):
                source = self._global_source.setdefault("epoch:" + key, worker)
                if worker == source:
                    self._epoch.setdefault((-1, key), _Series()).append(epoch + 1, y)
            else:
                self._epoch.setdefault((worker, key), _Series()).append(epoch + 1, y)

    def epoch_metric_names(self) -> list[str]:
        """Metric names (local and ``global_*``) seen in epoch summaries."""
        return sorted({k for (_w, k) in self._epoch})

    def epoch_series(self, worker: int | None, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(epoch from 1, value) of ``metric`` in the epoch summaries of ``worker`` (None: the global
        value, ``metric`` without its prefix)."""
        key = (worker, metric) if worker is not None else (-1, global_key(metric))
        series = self._epoch.get(key)
        return series.arrays() if series else (np.empty(0), np.empty(0))

    def _add_global(self, key: str, worker: int, step: float, y: float) -> None:
        source = self._global_source.setdefault(key, worker)
        if worker != source:
            return  # the same value again, from another worker
        self._global.setdefault(key, _Series()).append(step, y)

    @property
    def records(self) -> list[dict[str, Any]]:
        """All records, in arrival order, each with its ``worker``."""
        return [dict(r) for r in self._records]

    def __len__(self) -> int:
        return len(self._records)

    def workers(self) -> list[int]:
        return sorted({w for (w, _k) in self._local} | {r["worker"] for r in self._records})

    def metric_names(self) -> list[str]:
        """Local metric names and global ones (``global_*``) seen in step records."""
        return sorted({k for (_w, k) in self._local} | set(self._global))

    def local_series(self, worker: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of ``metric`` as reported by ``worker``."""
        series = self._local.get((worker, metric))
        return series.arrays() if series else (np.empty(0), np.empty(0))

    def global_series(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of ``global_<metric>``."""
        series = self._global.get(global_key(metric))
        return series.arrays() if series else (np.empty(0), np.empty(0))

    def point_count(self, worker: int, metric: str) -> int:
        series = self._local.get((worker, metric))
        return series.n if series else 0

    def to_dataframe(self) -> Any:
        """The records as a pandas DataFrame (one row per record; needs pandas)."""
        return records_to_dataframe(self._records)


def records_to_dataframe(records: Iterable[Mapping[str, Any]]) -> Any:
    """A pandas DataFrame of records, non-finite strings turned back into floats."""
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - pandas is a test dependency
        raise ImportError("records_to_dataframe needs pandas; use the list of records instead") from exc
    rows = []
    for record in records:
        row = {}
        for key, value in record.items():
            row[key] = _NONFINITE.get(value, value) if isinstance(value, str) else value
        rows.append(row)
    frame = pd.DataFrame(rows)
    front = [c for c in ("worker", "step", "kind", "epoch", "batch", "time") if c in frame.columns]
    return frame[front + [c for c in frame.columns if c not in front]]
