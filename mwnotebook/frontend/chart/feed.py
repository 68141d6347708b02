"""What the live widget is sent: only the points that are new since the last update, a few per line.

One plot per metric: step plots (what ``mw.report`` and Keras' batch logs send, x = step) and
epoch plots (metrics only seen at epoch ends, such as ``val_loss``, x = epoch). Each plot has a
line per worker (its local value) and the global line (series index ``num_workers``, taken from
the first worker that reported it, like :class:`~mwnotebook.shared.metrics.MetricsStore`).

Cost and size: workers can report thousands of steps a second, but an update carries at most
:func:`points_per_update` points per line: when more came, they are averaged in equal groups (a
NaN/inf in a group makes that point a gap). One update is a small JSON header plus one float32
buffer (x values then y values of each chunk), a few hundred bytes to ~2 kB for 8 workers.
Every point stays in the store as data; the browser keeps at most ~2,000 points per line
(``js/src/store.js`` halves a longer line).

The first updates of a widget are *key frames* (everything so far, which is little at that
time): custom messages that reach the page before the widget's JavaScript is loaded are dropped,
and a running cell cannot hear from the page that it is ready.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mwnotebook.shared.metrics import GLOBAL_PREFIX, Columns, as_float, epoch_points, step_columns

#: Float32 values (x and y) of all lines together in one update, about 0.8 kB (the frame around it,
#: Jupyter's message header and the JSON, is about as much again).
UPDATE_FLOATS = 200
#: Points per line kept for key frames (halved beyond twice this, as the browser does).
HISTORY_CAP = 1000

_LR_NAMES = frozenset({"lr", "learning_rate"})


@dataclass(frozen=True)
class PlotInfo:
    id: int
    metric: str
    axis: str  # "step" | "epoch"
    note: str

    def header(self) -> list[Any]:
        return [self.id, self.metric, self.axis, self.note]


def _plot_order(key: str) -> tuple[bool, bool, str]:
    metric = key[len(GLOBAL_PREFIX):] if key.startswith(GLOBAL_PREFIX) else key
    return metric != "loss", metric in _LR_NAMES, metric


def plot_note(metric: str, axis: str, kind: str) -> str:
    if axis == "epoch":
        return "one point per epoch (its end)"
    if metric in _LR_NAMES:
        return "learning rate"
    if kind == "batch":
        return "Keras' running mean over the epoch (restarts at each epoch mark)"
    return ""


class _Line:
    """The live points of one line: new ones not sent yet, and a bounded history for key frames."""

    __slots__ = ("new_x", "new_y", "hist_x", "hist_y")

    def __init__(self) -> None:
        self.new_x: list[float] = []
        self.new_y: list[float] = []
        self.hist_x: list[float] = []
        self.hist_y: list[float] = []

    def drop_from(self, x: float) -> bool:
        """Forget the points at x >= ``x`` (a resumed run redoes them); whether any were dropped."""
        before = len(self.hist_x) + len(self.new_x)
        for xs_name, ys_name in (("hist_x", "hist_y"), ("new_x", "new_y")):
            xs, ys = getattr(self, xs_name), getattr(self, ys_name)
            keep = [i for i, v in enumerate(xs) if v < x]
            setattr(self, xs_name, [xs[i] for i in keep])
            setattr(self, ys_name, [ys[i] for i in keep])
        return len(self.hist_x) + len(self.new_x) != before

    def take(self, limit: int) -> tuple[list[float], list[float]]:
        xs, ys = self.new_x, self.new_y
        self.new_x, self.new_y = [], []
        if len(xs) > limit:  # equal groups, averaged (NaN stays NaN: a gap)
            starts = np.linspace(0, len(xs), limit + 1).astype(np.int64)
            counts = np.diff(starts)
            with np.errstate(invalid="ignore"):
                xs = (np.add.reduceat(np.asarray(xs), starts[:-1]) / counts).tolist()
                ys = (np.add.reduceat(np.asarray(ys), starts[:-1]) / counts).tolist()
        self.hist_x.extend(xs)
        self.hist_y.extend(ys)
        if len(self.hist_x) > 2 * HISTORY_CAP:
            self._halve()
        return xs, ys

    def _halve(self) -> None:
        n = len(self.hist_x) // 2 * 2
        hx, hy = np.asarray(self.hist_x[:n]), np.asarray(self.hist_y[:n])
        rest_x, rest_y = self.hist_x[n:], self.hist_y[n:]
        self.hist_x = ((hx[0::2] + hx[1::2]) / 2).tolist() + rest_x
        self.hist_y = ((hy[0::2] + hy[1::2]) / 2).tolist() + rest_y


def points_per_update(lines: int) -> int:
    return max(2, min(32, UPDATE_FLOATS // (2 * max(1, lines))))


class LiveFeed:
    """Collects records into per-plot lines and cuts them into small update messages."""

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers
        self.plots: dict[tuple[str, str], PlotInfo] = {}
        self.lines: dict[tuple[int, int], _Line] = {}
        self._global_source: dict[str, int] = {}
        self.epochs: dict[int, float] = {}
        self._new_plots: list[PlotInfo] = []
        self._new_epochs: list[tuple[float, int]] = []
        self.note = ""
        self._note_sent = False
        self.names: list[str] = [f"worker {w}" for w in range(num_workers)] + ["global"]
        self._names_sent = True
        #: Who a line is, where not ``worker <index>`` (a --ps worker server's line, lines.py).
        self.line_names: dict[int, str] = {}
        self.seq = 0
        #: x positions of restart marks (``--max-restarts``): where each resumed attempt went on
        self.restarts: list[float] = []
        self._resumed: set[tuple[int, int]] | None = None  # lines that saw the current attempt
        self._need_key = False

    def restart(self) -> None:
        """A restart: each line's first point after it drops the line's points at and after its
        step (the resumed run redoes them), and the first such step is marked on the x-axis."""
        self._resumed = set()

    # -- input ---------------------------------------------------------------------------------
    def add(self, worker: int, records: Iterable[Mapping[str, Any]]) -> None:
        rows = list(records)
        steps = [r for r in rows if r.get("kind", "step") in ("step", "batch")]
        self.add_columns(worker, rows, step_columns(steps))

    def add_columns(self, worker: int, rows: Sequence[Mapping[str, Any]], columns: Columns) -> None:
        """``rows``: a worker's batch of records; ``columns``: its step records' columns (the store
        made them already: :meth:`~mwnotebook.shared.metrics.MetricsStore.add_batch`)."""
        epochs = {r.get("epoch") for r in rows if r.get("kind") == "batch"} - self.epochs.keys()
        for epoch in sorted(e for e in epochs if isinstance(e, int)):
            step = next(as_float(r.get("step")) for r in rows if r.get("epoch") == epoch and r.get("kind") == "batch")
            if step is not None:
                self.epochs[epoch] = step
                self._new_epochs.append((step, epoch))
        kind = "batch" if rows and rows[-1].get("kind") == "batch" else "step"
        for key in sorted(columns, key=_plot_order):  # loss first, the learning rate last
            xs, ys = columns[key]
            self._points(worker, key, "step", kind, xs, ys)
        for record in rows:
            if record.get("kind") == "epoch":
                for key, x, y in epoch_points(record):  # the store reads epoch summaries the same way
                    metric = key[len(GLOBAL_PREFIX):] if key.startswith(GLOBAL_PREFIX) else key
                    if (metric, "step") not in self.plots:  # not shown by a step plot
                        self._points(worker, key, "epoch", "epoch", [x], [y])

    def _points(self, worker: int, key: str, axis: str, kind: str, xs: list[float], ys: list[float]) -> None:
        if key.startswith(GLOBAL_PREFIX):
            metric = key[len(GLOBAL_PREFIX):]
            if self._global_source.setdefault(f"{axis}:{key}", worker) != worker:
                return  # the same global value again, from another worker
            index = self.num_workers
        else:
            metric, index = key, worker
        plot = self.plots.get((metric, axis))
        if plot is None:
            plot = PlotInfo(len(self.plots), metric, axis, plot_note(metric, axis, kind))
            self.plots[(metric, axis)] = plot
            self._new_plots.append(plot)
        line = self.lines.get((plot.id, index))
        if line is None:
            line = self.lines[(plot.id, index)] = _Line()
        if self._resumed is not None and (plot.id, index) not in self._resumed and xs:
            self._resumed.add((plot.id, index))
            if line.drop_from(xs[0]):
                self._need_key = True  # the page must forget them too: send everything again
            if axis == "step" and len(self._resumed) == 1:
                self.restarts.append(xs[0])
                self._need_key = True
        line.new_x.extend(xs)
        line.new_y.extend(ys)
        if not self.note and not all(map(math.isfinite, ys)):
            at = next(i for i, y in enumerate(ys) if not math.isfinite(y))
            who = "the global value" if index == self.num_workers else self.line_names.get(index, f"worker {worker}")
            self.note = (f"{who} reported {metric} = {ys[at]} at {axis} {xs[at]:g}: non-finite values are drawn "
                         "as gaps, marked \u25b2")
            self._note_sent = False

    def set_names(self, names: list[str]) -> None:
        if names != self.names:
            self.names = list(names)
            self._names_sent = False

    # -- output --------------------------------------------------------------------------------
    def message(self, key: bool = False) -> tuple[dict[str, Any], list[bytes]] | None:
        """The next update (``None`` when nothing changed); ``key``: everything so far."""
        key, self._need_key = key or self._need_key, False
        has_new = any(line.new_x for line in self.lines.values())
        if not key and not (has_new or self._new_plots or self._new_epochs or not self._note_sent
                            or not self._names_sent):
            return None
        limit = points_per_update(len(self.lines))
        chunks: list[list[int]] = []
        floats: list[float] = []
        for (plot, index), line in self.lines.items():
            xs, ys = line.take(limit)
            if key:
                xs, ys = line.hist_x, line.hist_y
            if xs:
                chunks.append([plot, index, len(xs)])
                floats.extend(xs)
                floats.extend(ys)
        content: dict[str, Any] = {"seq": self.seq, "key": key, "chunks": chunks}
        plots = list(self.plots.values()) if key else self._new_plots
        if plots:
            content["plots"] = [p.header() for p in plots]
        epochs = [(s, e) for e, s in self.epochs.items()] if key else self._new_epochs
        if epochs:
            content["epochs"] = [[s, e] for s, e in epochs]
        if key or not self._names_sent:
            content["names"] = self.names
        if key and self.restarts:
            content["restarts"] = self.restarts
        if self.note and (key or not self._note_sent):
            content["note"] = self.note
        self._new_plots, self._new_epochs = [], []
        self._note_sent = self._names_sent = True
        self.seq += 1
        return content, [np.asarray(floats, dtype=np.float32).tobytes()]
