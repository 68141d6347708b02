"""The per-worker status table: state, step, last value and steps per second, from events."""

from __future__ import annotations

import html
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mwnotebook.shared.events import WorkerMetrics, WorkerResources, WorkerStateChanged
from mwnotebook.shared.metrics import as_float, global_key, is_step_record
from mwnotebook.shared.run_states import RunStates
from mwnotebook.shared.step_times import StepTimes

_STATE_COLOURS = {
    "starting": "#6c757d",
    "idle": "#6c757d",
    "running": "#0d6efd",
    "done": "#198754",
    "failed": "#dc3545",
    "stopped": "#6c757d",
}
_FAILED_BG = "#f8d7da"


@dataclass
class WorkerStatus:
    """What the status table shows for one worker."""

    worker: int
    state: str = "starting"
    error: str = ""
    step: float | None = None
    last_value: float | None = None
    last_scope: str = ""  # "local" | "global"
    recent: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=64))  # (worker time, step)
    resources: WorkerResources | None = None  # CPU and memory read on its host (engine/usage.py)

    def steps_per_s(self) -> float | None:
        """Steps per second over the recent records, from the workers' own timestamps."""
        if len(self.recent) < 2:
            return None
        (t0, s0), (t1, s1) = self.recent[0], self.recent[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None


class StatusBoard:
    """Every worker's :class:`WorkerStatus`, kept up to date from events (not thread-safe: the
    dashboard holds its lock)."""

    def __init__(self, num_workers: int, metric: str, names: Mapping[int, str] | None = None) -> None:
        self.metric = metric
        #: Kernels that are not plain replicas (a --ps cluster's ``coordinator``, frontend/chart/lines.py),
        #: so the table's "worker 0" never means the coordinator beside a worker server's curve.
        self.names = dict(names or {})
        self.workers = {w: WorkerStatus(w) for w in range(num_workers)}
        self.run_states = RunStates(num_workers)  # which state changes count: shared/run_states.py
        self.step_times = StepTimes()  # time before and in the collective: shared/step_times.py

    def status_for(self, worker: int) -> WorkerStatus:
        status = self.workers.get(worker)
        if status is None:  # more workers than announced: show them too
            status = self.workers[worker] = WorkerStatus(worker)
        return status

    def on_state(self, event: WorkerStateChanged) -> bool:
        """Apply a state change; False when it is ignored."""
        if not self.run_states.apply(event):
            return False  # keep how the run ended (a restart after a failure says starting/idle)
        status = self.status_for(event.worker)
        status.state, status.error = self.run_states.state(event.worker), self.run_states.error(event.worker)
        return True

    def on_metrics(self, event: WorkerMetrics) -> None:
        status = self.status_for(event.worker)
        self.run_states.progressed(event.worker)
        status.state = self.run_states.state(event.worker)
        gkey = global_key(self.metric)
        # only the last records count (the step, the last value, the recent rate's 64 stamps)
        for record in event.records:
            if is_step_record(record):
                self.step_times.add(event.worker, record)
        for record in event.records[-(status.recent.maxlen or 64):]:
            if not is_step_record(record):
                continue
            step = as_float(record.get("step"))
            if step is None:
                continue
            status.step = step
            stamp = as_float(record.get("time"))
            if stamp is not None:
                status.recent.append((stamp, step))
            if self.metric in record:
                status.last_value, status.last_scope = as_float(record[self.metric]), "local"
            elif gkey in record:
                status.last_value, status.last_scope = as_float(record[gkey]), "global"

    def on_resources(self, event: WorkerResources) -> None:
        self.status_for(event.worker).resources = event

    def rows(self) -> list[dict[str, Any]]:
        """The status table as data: one dict per worker (``own_ms``/``wait_ms``: medians of the time
        before and in the collective per step, where measured)."""
        split = self.step_times.workers()
        return [{"worker": w, "state": s.state, "error": s.error, "step": s.step, "last": s.last_value,
                 "scope": s.last_scope, "steps_per_s": s.steps_per_s(),
                 "own_ms": split[w].own * 1e3 if w in split else None,
                 "wait_ms": split[w].wait * 1e3 if w in split else None,
                 "cpu_percent": s.resources.cpu_percent if s.resources else None,
                 "memory_mib": s.resources.memory_bytes / 2**20 if s.resources and s.resources.memory_bytes else None,
                 "near_limit": bool(s.resources and s.resources.near_limit)}
                for w, s in sorted(self.workers.items())]

    def html(self) -> str:
        rows = self.rows()
        split = any(row["own_ms"] is not None for row in rows)
        usage = any(row["memory_mib"] is not None for row in rows)
        titles = ("worker", "state", "step", f"last {self.metric}", "steps/s") + (
            ("ms before collective", "ms in collective") if split else ()) + (("CPU %", "memory MiB") if usage else ())
        head = "".join(f"<th style='padding:2px 10px;text-align:left'>{h}</th>" for h in titles)
        body = []
        for row in rows:
            failed = row["state"] == "failed"
            colour = _STATE_COLOURS.get(row["state"], "#000")
            state = html.escape(row["state"] + (f": {row['error']}" if failed and row["error"] else ""))
            last = "" if row["last"] is None else f"{row['last']:.4g}"
            if last and row["scope"] == "global":
                last += " (global)"
            who = html.escape(self.names.get(row["worker"], str(row["worker"])))
            cells = [who, f"<b style='color:{colour}'>{state}</b>",
                     "" if row["step"] is None else f"{row['step']:g}", last,
                     "" if row["steps_per_s"] is None else f"{row['steps_per_s']:.1f}"]
            if split:
                cells += ["" if row[k] is None else f"{row[k]:.1f}" for k in ("own_ms", "wait_ms")]
            if usage:
                cells += ["" if row["cpu_percent"] is None else f"{row['cpu_percent']:.0f}",
                          ("" if row["memory_mib"] is None else f"{row['memory_mib']:.0f}")
                          + (" (near its limit)" if row["near_limit"] else "")]
            style = f" style='background:{_FAILED_BG}'" if failed else ""
            body.append(f"<tr class='mw-worker mw-{row['state']}'{style}>" + "".join(
                f"<td style='padding:2px 10px'>{c}</td>" for c in cells) + "</tr>")
        return ("<table class='mw-status' style='border-collapse:collapse;font-family:monospace'>"
                f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")

    def text(self) -> str:
        parts = []
        for row in self.rows():
            text = f"{self.names.get(row['worker'], 'worker ' + str(row['worker']))}: {row['state']}"
            if row["error"]:
                text += f" ({row['error']})"
            if row["step"] is not None:
                text += f", step {row['step']:g}"
            if row["last"] is not None:
                text += f", {self.metric} {row['last']:.4g}"
            if row["own_ms"] is not None:
                text += f", {row['own_ms']:.1f} ms before the collective, {row['wait_ms']:.1f} ms in it"
            if row["memory_mib"] is not None:
                text += f", {row['memory_mib']:.0f} MiB" + (" (near its memory limit)" if row["near_limit"] else "")
            parts.append(text)
        return "\n".join(parts)
