"""Pure helpers for metric records: collect them per worker, pick series, downsample, tabulate.

A *record* is one flat dict a worker reported (see :mod:`mwnotebook.worker._report`)::

    {"worker": 0, "step": 12, "time": 1732900000.1, "loss": 0.41, "global_loss": 0.43}

Naming convention (what keeps local and global numbers apart):

* ``loss`` -- the worker's own (local) value, computed on its shard of the batch;
* ``global_loss`` -- the value over all workers (identical on every worker);
* records with ``"kind": "epoch"`` are epoch summaries; curves are drawn from step records;
* ``server`` -- in a ``--ps`` coordinator's records, the worker server that computed them.

Restarts (``--max-restarts``): every record carries the ``attempt`` it came from (1, then 2 after
the first restart, ...). :meth:`MetricsStore.add_restart` marks a restart; the first point a
series gets after it, at step ``s``, replaces that series' points at steps >= ``s`` (the progress
the lost attempt made after its last backup, which the resumed run redoes), so a series stays one
run along the x-axis and nothing is drawn twice as new progress. The records keep every point.

Non-finite floats travel as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (JSON has no
NaN); :func:`as_float` turns them back into floats.

Nothing here imports TensorFlow, IPython or widgets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mwnotebook.shared.step_times import TIMING_KEYS

GLOBAL_PREFIX = "global_"
#: Keys that describe a record rather than measure something.
#: (``step_*_s``: a worker's step split, shared/step_times.py.)
META_KEYS = frozenset({"worker", "server", "step", "time", "kind", "epoch", "batch", "attempt"}) | TIMING_KEYS

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


def epoch_points(record: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """An epoch summary's measured values as ``(key, x, y)``, x = the epoch's number from 1 (Keras
    counts from 0); none when the record names no epoch. The one reading of an epoch summary: the
    store's (:class:`MetricsStore`) and the live chart's (frontend/chart/feed.py)."""
    epoch = as_float(record.get("epoch"))
    if epoch is None:
        return []
    points = []
    for key, value in record.items():
        y = as_float(value)
        if key not in META_KEYS and y is not None:
            points.append((key, epoch + 1, y))
    return points


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

    def drop_from(self, x: float) -> int:
        """Remove the points at x >= ``x`` (a resumed run redoes them); how many were removed."""
        keep = self._x[: self.n] < x
        kept = int(keep.sum())
        if kept == self.n:
            return 0
        self._x[:kept] = self._x[: self.n][keep]
        self._y[:kept] = self._y[: self.n][keep]
        dropped, self.n = self.n - kept, kept
        return dropped


@dataclass
class RestartMark:
    """Where a restart is drawn on the x-axis (see the module docstring)."""

    #: The attempt that begins here (2 for the first restart).
    attempt: int
    #: The cause, one line (``worker 1 died (SIGKILL)``).
    cause: str
    #: Wall-clock time of the loss, and seconds until fresh workers were ready.
    time: float = 0.0
    restart_seconds: float = 0.0
    #: The last step plotted before the loss (None: nothing yet).
    lost_step: float | None = None
    #: The first step the resumed run reported (None until it reports): the mark's x position.
    resumed_step: float | None = None
    #: Points of the lost attempt replaced by the resumed run (redone work).
    replaced_points: int = 0

    @property
    def step(self) -> float | None:
        """The x position of the mark: where the resumed run continues (or, before it reports, where
        the lost one stopped)."""
        return self.resumed_step if self.resumed_step is not None else self.lost_step


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
        self._global_last: dict[str, float] = {}
        self._global_ahead: dict[str, list[tuple[float, float]]] = {}
        self._attempt = 1
        self._marks: list[RestartMark] = []
        self._series_attempt: dict[Any, int] = {}
        self._last_step: float | None = None

    @property
    def attempt(self) -> int:
        """The attempt new records belong to (1 until the first restart)."""
        return self._attempt

    def add_restart(self, cause: str, *, time: float = 0.0, restart_seconds: float = 0.0) -> RestartMark:
        """A restart: records added from now on belong to the next attempt (see the module docstring)."""
        self._fill_from_others()
        self._attempt += 1
        mark = RestartMark(self._attempt, cause, time, restart_seconds, lost_step=self._last_step)
        self._marks.append(mark)
        self._last_step = None  # lost_step of the next mark: the last step of the attempt starting now
        return mark

    def restart_marks(self) -> list[RestartMark]:
        """Every restart so far, in order, each with its x position (:attr:`RestartMark.step`)."""
        return list(self._marks)

    def _series_for(self, key: Any, series: dict[Any, _Series], step: float) -> _Series:
        """The series of ``key``; its points redone by a resumed attempt are dropped first."""
        line = series.setdefault(key, _Series())
        seen = self._series_attempt.setdefault(key, self._attempt)
        if seen != self._attempt:
            self._series_attempt[key] = self._attempt
            dropped = line.drop_from(step)
            if self._marks:
                mark = self._marks[-1]
                mark.replaced_points += dropped
                if mark.resumed_step is None or step < mark.resumed_step:
                    mark.resumed_step = step
        return line

    def add(self, worker: int, records: Iterable[Mapping[str, Any]]) -> int:
        """Keep ``records`` from ``worker``; returns how many were added."""
        return len(self.add_batch(worker, records)[0])

    def add_batch(self, worker: int, records: Iterable[Mapping[str, Any]], *,
                  line: int | None = None) -> tuple[list[dict[str, Any]], Columns]:
        """Keep ``records`` from ``worker``; returns them (with ``worker``) and their step records'
        columns (see :func:`step_columns`), which the live chart reuses. Works a column at a time:
        a worker's batch holds hundreds of records of the same keys. ``line``: the series they are
        drawn on when it is not the worker's own (a ``--ps`` worker server's, frontend/chart/lines.py);
        the records still name the kernel that sent them."""
        rows = []
        attempt = self._attempt
        for raw in records:  # the worker named itself already (worker/_report.py): no copy then
            record = raw if type(raw) is dict and raw.get("worker") == worker else dict(raw, worker=worker)
            record["attempt"] = attempt
            rows.append(record)
        self._records.extend(rows)
        worker = worker if line is None else line
        steps = []
        for record in rows:
            kind = record.get("kind")
            if kind == "epoch":
                self._add_epoch(worker, record)
            elif kind is None or kind in ("step", "batch"):
                steps.append(record)
        columns = step_columns(steps)
        for key, (xs, ys) in columns.items():
            top = max(xs)
            self._last_step = top if self._last_step is None else max(self._last_step, top)
            if key.startswith(GLOBAL_PREFIX):
                self._add_global(key, worker, xs, ys)
            else:
                self._series_for((worker, key), self._local, xs[0]).extend(xs, ys)
        return rows, columns

    def _add_epoch(self, worker: int, record: Mapping[str, Any]) -> None:
        """An epoch summary's values (:func:`epoch_points`); a global one from its first worker only."""
        for key, x, y in epoch_points(record):
            if key.startswith(GLOBAL_PREFIX):
                source = self._global_source.setdefault("epoch:" + key, worker)
                if worker == source:
                    self._epoch.setdefault((-1, key), _Series()).append(x, y)
            else:
                self._epoch.setdefault((worker, key), _Series()).append(x, y)

    def epoch_metric_names(self) -> list[str]:
        """Metric names (local and ``global_*``) seen in epoch summaries."""
        return sorted({k for (_w, k) in self._epoch})

    def epoch_series(self, worker: int | None, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(epoch from 1, value) of ``metric`` in the epoch summaries of ``worker`` (None: the global
        value, ``metric`` without its prefix)."""
        key = (worker, metric) if worker is not None else (-1, global_key(metric))
        series = self._epoch.get(key)
        return series.arrays() if series else (np.empty(0), np.empty(0))

    def _add_global(self, key: str, worker: int, xs: list[float], ys: list[float]) -> None:
        source = self._global_source.setdefault(key, worker)
        if worker != source:
            # The same values again, from another worker: kept only while the source has not sent
            # those steps, in case the source dies with them unsent (see add_restart).
            last = self._global_last.get(key)
            ahead = [(x, y) for x, y in zip(xs, ys) if last is None or x > last]
            if ahead:
                self._global_ahead.setdefault(key, []).extend(ahead)
            return
        self._series_for(key, self._global, xs[0]).extend(xs, ys)
        step = max(xs)
        self._global_last[key] = step
        pending = self._global_ahead.get(key)
        if pending:
            pending[:] = [(x, v) for x, v in pending if x > step]

    def _fill_from_others(self) -> None:
        """At a restart: the global points the survivors sent past the source's last one (a killed
        source loses what it had not sent yet), so the lost attempt's curve has no hole."""
        for key, ahead in self._global_ahead.items():
            last = self._global_last.get(key, -math.inf)
            series = self._global.setdefault(key, _Series())
            for x, v in sorted(dict(ahead).items()):
                if x > last:
                    series.append(x, v)
                    last = x
            self._global_last[key] = last
        self._global_ahead.clear()

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
