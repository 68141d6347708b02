"""Per-step time before the collective and in it, per worker, and the verdict naming a slow worker.

In synchronous training every worker's step lasts as long as the slowest worker's: each waits in the
gradient all-reduce for the others. So step times alone cannot say who holds the run back. A worker
measures, per step (``mwnotebook/worker/_step_clock.py``), its **own** time (from the step's start to
its arrival at the collective: waiting for input, then computing) and its **wait** (from there to the
step's end). The worker whose own time is clearly above the others' is the slow one; the others' wait
is the time they spend waiting for it.

The threshold (:data:`RATIO`, :data:`MIN_GAP_S`, :data:`MIN_STEPS` after :data:`WARMUP_STEPS`), and why:

* each worker's figure is the **median** of its per-step times after warm-up, so that a garbage
  collection or a preempted step on a loaded machine does not make a worker "slow";
* the first :data:`WARMUP_STEPS` steps are left out: they hold tracing and the first collective's
  set-up, which differ between workers for reasons that do not last;
* one worker's own time must be more than :data:`RATIO` (1.5) times the median of the others' own
  times: on an even cluster sharing 2 loaded cores the workers' own times differ by tens of percent
  (scheduling), never by half again for the whole run;
* and at least :data:`MIN_GAP_S` (10 ms) more: with steps of a few milliseconds a 1.5x ratio is within
  the jitter of the OS scheduler and of Python's callbacks, and nothing a student can act on;
* over at least :data:`MIN_STEPS` measured steps of every worker.

Input-bound or compute-bound: where the input time is measured (``fit``: the time until the step's
batch is there), the slow worker is input-bound when more than half of its own time is waiting for
input, else compute-bound; where it is not measured the verdict says "slower before the collective".

Pure: records in, numbers and one line out (unit-tested with fake timings,
tests/unit/test_step_times.py).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Keys of a step record (seconds) with the worker's step split; not metrics (shared/metrics.py META_KEYS).
OWN_KEY = "step_own_s"
WAIT_KEY = "step_wait_s"
INPUT_KEY = "step_input_s"
TIMING_KEYS = frozenset({OWN_KEY, WAIT_KEY, INPUT_KEY})

WARMUP_STEPS = 5
MIN_STEPS = 5
RATIO = 1.5
MIN_GAP_S = 0.010
#: Input-bound when waiting for input is more than this share of the slow worker's own time.
INPUT_SHARE = 0.5


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and number >= 0 else None  # not NaN, not negative


#: The medians are over each worker's last this many measured steps (a long run's table stays cheap).
WINDOW = 2000


@dataclass
class _Samples:
    seen: int = 0
    no_input: bool = False
    own: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    wait: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    input: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))


@dataclass(frozen=True)
class WorkerTimes:
    """One worker's medians after warm-up (seconds); ``input`` None where not measured."""

    worker: int
    steps: int
    own: float
    wait: float
    input: float | None


@dataclass(frozen=True)
class Verdict:
    """The slow worker and the figures that name it."""

    worker: int
    own: float
    others_own: float
    others_wait: float
    input: float | None
    steps: int

    @property
    def bound(self) -> str:
        if self.input is None:
            return "slower before the collective"
        return "input-bound" if self.input > INPUT_SHARE * self.own else "compute-bound"

    def line(self, name: str | None = None) -> str:
        """The one line printed at the end of the cell."""
        who = name or f"worker {self.worker}"
        inside = "" if self.input is None else f" ({self.input * 1e3:.0f} ms of it waiting for input)"
        return (f"mwnotebook: {who} is the slow worker, {self.bound}: {self.own * 1e3:.0f} ms per step "
                f"before the collective{inside}, the others {self.others_own * 1e3:.0f} ms; they wait "
                f"{self.others_wait * 1e3:.0f} ms per step for it (medians over {self.steps} steps after "
                f"{WARMUP_STEPS} warm-up steps)")


class StepTimes:
    """Collects the timing fields of step records, per worker (fed record by record)."""

    def __init__(self, warmup: int = WARMUP_STEPS) -> None:
        self._warmup = warmup
        self._samples: dict[int, _Samples] = {}

    def add(self, worker: int, record: Mapping[str, Any]) -> None:
        own, wait = _number(record.get(OWN_KEY)), _number(record.get(WAIT_KEY))
        if own is None or wait is None:
            return
        samples = self._samples.setdefault(worker, _Samples())
        samples.seen += 1
        if samples.seen <= self._warmup:
            return
        samples.own.append(own)
        samples.wait.append(wait)
        measured = _number(record.get(INPUT_KEY))
        if measured is None:
            samples.input.clear()  # a step without it: no input figure for this worker
            samples.no_input = True
        elif not samples.no_input:
            samples.input.append(measured)

    def workers(self) -> dict[int, WorkerTimes]:
        """Each worker with measured steps after warm-up."""
        out: dict[int, WorkerTimes] = {}
        for worker, s in sorted(self._samples.items()):
            if s.own:
                out[worker] = WorkerTimes(worker, len(s.own), statistics.median(s.own),
                                          statistics.median(s.wait),
                                          statistics.median(s.input) if s.input and not s.no_input else None)
        return out

    def verdict(self) -> Verdict | None:
        return slow_worker(self.workers().values())


def from_records(records: Iterable[Mapping[str, Any]], warmup: int = WARMUP_STEPS) -> StepTimes:
    """A :class:`StepTimes` of records that carry their ``worker`` (the chart's and the CLI's stores)."""
    times = StepTimes(warmup)
    for record in records:
        worker = record.get("worker")
        if isinstance(worker, int) and record.get("kind", "step") in ("step", "batch"):
            times.add(worker, record)
    return times


def slow_worker_line(records: Iterable[Mapping[str, Any]], names: Mapping[int, str] | None = None) -> str | None:
    """The end-of-cell line naming the slow worker of a run's records, or None (even workers, or no
    step split measured). ``names``: kernels that are not plain workers (``{0: "coordinator"}``)."""
    verdict = from_records(records).verdict()
    if verdict is None:
        return None
    return verdict.line((names or {}).get(verdict.worker))


def slow_worker(workers: Iterable[WorkerTimes]) -> Verdict | None:
    """The worker whose own time is clearly above the others' (module docstring), or None."""
    listed = list(workers)
    if len(listed) < 2 or any(w.steps < MIN_STEPS for w in listed):
        return None
    slowest = max(listed, key=lambda w: w.own)
    others = [w for w in listed if w is not slowest]
    others_own = statistics.median(w.own for w in others)
    if slowest.own <= RATIO * others_own or slowest.own - others_own < MIN_GAP_S:
        return None
    return Verdict(slowest.worker, slowest.own, others_own, statistics.median(w.wait for w in others),
                   slowest.input, min(w.steps for w in listed))
