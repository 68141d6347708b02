"""``--profile DIR``: TensorFlow's profiler on every worker over the same steps, and what it found.

:func:`run_profiled` arms every worker (``mwnotebook/worker/_profile.py``: a window of steps counted by
the worker's step clock, a run name shared by all), runs the cell, then reads each worker's summary.
The traces land in ``DIR/plugins/profile/<run>/<task>.xplane.pb``, one host entry per worker in
TensorBoard's Profile tab (``tensorboard --logdir DIR``). :class:`ProfileSummary` turns each worker's
traced steps into one line: the step split into input (waiting for the batch), compute (the rest of
the time before the gradient all-reduce) and collective (waiting in it, i.e. for the others), judged
by the seed's input-bound rule (``mwnotebook/profiling.py``: under 5 % of the step waiting for input),
with the rule's advice under a worker that breaks it and the mixed precision and XLA checks once.

The summary's figures are means over the window's steps (so the three parts add up to the step), taken
while the profiler runs: they include its cost (benchmarks/profile.py). The profiler itself runs from
the window's first step to the end of the cell (``worker/_profile.py`` says why it is not stopped
after the window's last step).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mwnotebook.errors import ClusterRunError, ConfigError
from mwnotebook.profiling import InputBoundReport, input_check
from mwnotebook.shared.events import EventSink
from mwnotebook.shared.step_times import INPUT_KEY, OWN_KEY, WAIT_KEY, WARMUP_STEPS

if TYPE_CHECKING:  # the engine is the caller's; this module only drives it
    from mwnotebook.engine.cell.result import RunResult
    from mwnotebook.engine.cluster import Cluster

log = logging.getLogger(__name__)

#: The default window: five steps after the step clock's warm-up (shared/step_times.py).
FIRST_STEP = WARMUP_STEPS + 1
LAST_STEP = WARMUP_STEPS + 5
MARK = "mwnotebook-profile: "  # the worker's summary line (worker/_profile.py MARK)
#: Below this the step clock's input figure is its own floor, not a slow pipeline: an even tf_keras fit
#: with a ready batch shows 1.5-2 ms on this project's loaded 2-core machines (the call from the
#: batch-begin callback into the step function counts as "input"), 6-13 % of a short step.
INPUT_FLOOR_S = 0.003


def parse_steps(text: str) -> tuple[int, int]:
    """``A:B`` (steps A to B, both traced, counted from 1) or ``A`` (that step only)."""
    first_text, sep, last_text = text.strip().partition(":")
    try:
        first = int(first_text)
        last = int(last_text) if sep else first
    except ValueError:
        raise ConfigError(f"--profile-steps takes FIRST:LAST (step numbers from 1, e.g. {FIRST_STEP}:{LAST_STEP}), "
                          f"got {text!r}") from None
    if first < 1 or last < first:
        raise ConfigError(f"--profile-steps {text}: the first step must be >= 1 and the last >= the first "
                          f"(e.g. {FIRST_STEP}:{LAST_STEP})")
    return first, last


@dataclass(frozen=True)
class ProfileRequest:
    """Where the traces go and which steps are traced (1-based, both ends traced). An empty ``directory``:
    no profiler, only the window's split at the end of the cell (``--profile-steps`` alone)."""

    directory: str
    first: int = FIRST_STEP
    last: int = LAST_STEP

    @classmethod
    def of(cls, directory: str | os.PathLike[str], steps: str | None = None) -> ProfileRequest:
        """From the magic's ``--profile DIR [--profile-steps A:B]`` (checked: :meth:`check`)."""
        first, last = parse_steps(steps) if steps else (FIRST_STEP, LAST_STEP)
        return cls(str(directory), first, last)

    def check(self) -> None:
        """Refuse, before anything starts, a folder this notebook cannot write and a window that is
        no window (remote workers check their own hosts' folder when they are armed)."""
        if self.first < 1 or self.last < self.first:
            raise ConfigError(f"--profile-steps {self.first}:{self.last}: the first step must be >= 1 and the last "
                              ">= the first")
        if not self.directory:
            return
        if not self.directory.strip():
            raise ConfigError("--profile needs a folder: --profile DIR")
        folder = Path(self.directory).expanduser()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / f".mwnotebook-write-test-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise ConfigError(f"--profile {self.directory}: cannot write there ({exc.strerror or exc}); give a "
                              "folder you can write, e.g. --profile profiles") from None

    def arm_code(self, run: str) -> str:
        """The code every worker runs before the cell."""
        folder = str(Path(self.directory).expanduser().absolute()) if self.directory else ""
        return (f"import mwnotebook.worker._profile as _mw_profile\n"
                f"_mw_profile.arm({folder!r}, {run!r}, {self.first}, {self.last})\n")

    @property
    def steps_text(self) -> str:
        """``steps A-B`` (or ``step A``), as the lines at the end of the cell say it."""
        return f"step {self.first}" if self.first == self.last else f"steps {self.first}-{self.last}"


FINISH_CODE = "import mwnotebook.worker._profile as _mw_profile\n_mw_profile.finish()\n"


def run_name(now: float | None = None) -> str:
    """A run's folder name as TensorFlow's profiler names its own (sorted by time in TensorBoard)."""
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(now))


@dataclass(frozen=True)
class WorkerProfile:
    """One kernel's window: steps it counted, steps traced, the trace file and the split's means (s)."""

    kernel: int
    name: str
    steps: int
    traced: tuple[int, ...]
    trace: str | None
    error: str = ""
    step: float | None = None
    input: float | None = None
    own: float | None = None
    collective: float | None = None
    checks: tuple[str, ...] = ()

    @classmethod
    def of(cls, kernel: int, name: str, summary: Mapping[str, Any]) -> WorkerProfile:
        splits = [s for s in summary.get("splits") or [] if OWN_KEY in s and WAIT_KEY in s]
        own = _mean([s[OWN_KEY] for s in splits])
        wait = _mean([s[WAIT_KEY] for s in splits])
        inputs = [s[INPUT_KEY] for s in splits if INPUT_KEY in s]
        return cls(kernel, name, int(summary.get("steps") or 0), tuple(summary.get("traced") or ()),
                   summary.get("trace"), str(summary.get("error") or ""),
                   step=None if own is None or wait is None else own + wait,
                   input=_mean(inputs) if len(inputs) == len(splits) else None, own=own, collective=wait,
                   checks=tuple(summary.get("checks") or ()))

    @property
    def steps_text(self) -> str:
        """The steps this worker's figures are over."""
        if not self.traced:
            return "no step"
        first, last = self.traced[0], self.traced[-1]
        return f"step {first}" if first == last else f"steps {first}-{last}"

    @property
    def compute(self) -> float | None:
        return None if self.own is None or self.input is None else max(0.0, self.own - self.input)

    def rule(self) -> InputBoundReport | None:
        """The seed's input-bound rule on the traced steps (mwnotebook/profiling.py)."""
        if self.step is None or self.input is None or not self.traced:
            return None
        n = len(self.traced)
        return InputBoundReport(n, self.input * n, (self.step - self.input) * n)

    def line(self) -> str:
        """This worker's split of the traced steps, and the rule's verdict."""
        if self.step is None or self.own is None or self.collective is None:
            return (f"mwnotebook: {self.name}: no step split measured (it needs MultiWorkerMirroredStrategy with "
                    "more than one worker, and a tf_keras fit or a custom loop's mw.report)")
        ms = 1e3
        if self.input is None or self.compute is None:
            parts = (f"before the collective {self.own * ms:.1f} (input not measured here) + collective "
                     f"{self.collective * ms:.1f} ms")
            return f"mwnotebook: {self.name}, {self.steps_text}: {self.step * ms:.1f} ms per step = {parts}"
        parts = (f"input {self.input * ms:.1f} + compute {self.compute * ms:.1f} + collective "
                 f"{self.collective * ms:.1f} ms")
        rule = self.rule()
        if self.input_bound:
            verdict = "INPUT BOUND"
        elif rule is None or not rule.input_bound:
            verdict = "ok"
        elif self.waits_for_others:
            verdict = "ok here: its step is set by the others, it waits for them in the collective"
        else:
            verdict = "ok, within the step clock's own floor"
        return (f"mwnotebook: {self.name}, {self.steps_text}: {self.step * ms:.1f} ms per step = {parts}; input "
                f"{self.input / self.step:.0%} of the step: {verdict} (rule: < 5 %)")

    @property
    def waits_for_others(self) -> bool:
        """Most of its step in the collective: another worker sets the pace (its own input does not)."""
        return self.step is not None and self.collective is not None and self.collective >= 0.5 * self.step

    @property
    def input_bound(self) -> bool:
        """The seed's rule (written for one device) broken by more than the step clock's own floor
        (:data:`INPUT_FLOOR_S`), by a worker that does not spend most of its step waiting for the others:
        under synchronous training a waiting worker's step is set by another worker, whatever its own
        pipeline does (its input figure with a ready batch was 1.5-5 ms on this project's loaded machines)."""
        rule = self.rule()
        return (rule is not None and rule.input_bound and (self.input or 0.0) >= INPUT_FLOOR_S
                and not self.waits_for_others)

    def advice(self) -> str:
        """The rule's advice (mwnotebook/profiling.py) under a worker that is input-bound."""
        item = input_check(self.rule())
        return item.advice if self.input_bound and item.status == "advice" else ""


def _mean(values: Sequence[float]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    return sum(numbers) / len(numbers) if numbers else None


@dataclass
class ProfileSummary:
    """Every kernel's window after the cell, and the lines printed at its end."""

    request: ProfileRequest
    run: str
    workers: list[WorkerProfile] = field(default_factory=list)
    #: Why no worker's summary came back (a worker lost while its profiler stopped), or "".
    lost: str = ""

    @property
    def folder(self) -> Path:
        """The run's folder: ``DIR/plugins/profile/<run>`` (TensorBoard's place for one run's hosts)."""
        return Path(self.request.directory).expanduser().absolute() / "plugins" / "profile" / self.run

    def traces(self) -> list[str]:
        """The trace files written, one per worker that traced."""
        return [w.trace for w in self.workers if w.trace]

    def lines(self) -> list[str]:
        """What the end of the cell says: where the traces are, each worker's split, what went wrong."""
        out: list[str] = []
        if self.lost:
            kept = sorted(p.name for p in self.folder.glob("*.xplane.pb")) if self.folder.is_dir() else []
            out.append(f"mwnotebook: the profile's summary was lost: {self.lost}. The cell's own run had ended; "
                       "TensorFlow's profiler crashes a worker now and then as it stops (docs/guide/profiling.md); "
                       f"traces kept in {self.folder}: {', '.join(kept) or 'none'}")
            return out
        traced = [w for w in self.workers if w.trace]
        if traced:
            hosts = ", ".join(Path(w.trace).name for w in traced if w.trace)
            out.append(f"mwnotebook: traces from step {self.request.first} to the cell's end in {self.folder} "
                       f"({hosts}): tensorboard --logdir {self.request.directory}, then the Profile tab "
                       "(one host per worker)")
        short = [w for w in self.workers if w.steps < self.request.last]
        if short:
            counted = sorted({w.steps for w in short})
            ran = f"{counted[0]} steps" if len(counted) == 1 else f"{counted[0]}-{counted[-1]} steps"
            if all(w.steps < self.request.first for w in short):
                out.append(f"mwnotebook: nothing traced: the run had {ran}, the window starts at step "
                           f"{self.request.first}; give --profile-steps within the run (e.g. "
                           f"{_inside(max(counted))})")
            else:
                out.append(f"mwnotebook: the run had {ran}, fewer than the window's {self.request.last}: only "
                           f"steps {self.request.first}-{max(counted)} traced")
        for worker in self.workers:
            if worker.error:
                out.append(f"mwnotebook: {worker.name}: {worker.error}")
            if worker.traced:
                out.append(worker.line())
                advice = worker.advice()
                if advice:
                    out.append(f"      -> {advice}")
        checks = next((w.checks for w in self.workers if w.checks), ())
        if checks and any(w.traced for w in self.workers):
            out.append("mwnotebook: the other single-device checks (mwnotebook.profiling):")
            out.extend(f"  {c}" for c in checks)
        return out

    def text(self) -> str:
        """:meth:`lines` as one text (what the magic prints)."""
        return "\n".join(self.lines())


def _inside(steps: int) -> str:
    if steps <= 1:
        return "1:1"
    first = min(FIRST_STEP, max(1, steps // 2))
    return f"{first}:{steps}"


def read_summary(request: ProfileRequest, run: str, result: RunResult,
                 names: Mapping[int, str] | None = None) -> ProfileSummary:
    """Each kernel's summary line from the finish step's output."""
    summary = ProfileSummary(request, run)
    for kernel in range(result.num_workers):
        name = (names or {}).get(kernel) or f"worker {kernel}"
        found: dict[str, Any] = {"error": "no summary came back from this worker"}
        for text in result.stdout(kernel).splitlines():
            if text.startswith(MARK):
                try:
                    found = json.loads(text[len(MARK):])
                except ValueError:
                    found = {"error": "its summary could not be read"}
        summary.workers.append(WorkerProfile.of(kernel, name, found))
    return summary


def run_profiled(cluster: Cluster, code: str, request: ProfileRequest, *, on_event: EventSink | None = None,
                 timeout: float | None = None, max_restarts: int | None = None,
                 names: Mapping[int, str] | None = None) -> tuple[RunResult, ProfileSummary]:
    """Run ``code`` on every worker with TensorFlow's profiler over ``request``'s steps.

    The folder is checked first (ConfigError, nothing started). Each worker is then armed (a worker
    that cannot write there fails this step: ClusterRunError, the cell does not run), the cell runs as
    :meth:`Cluster.run` runs it, and each worker's summary is read. A cell that fails raises as
    usual; its workers' profilers are stopped when they are next armed. ``names``: kernels that are
    not plain workers (``{0: "coordinator"}``), for the summary's lines.
    """
    request.check()
    run = run_name()
    cluster.run(request.arm_code(run), timeout=120)  # a worker that cannot write there: ClusterRunError
    result = cluster.run(code, on_event=on_event, timeout=timeout, max_restarts=max_restarts)
    try:
        finished = cluster.run(FINISH_CODE, timeout=120)
    except ClusterRunError as exc:  # the cell's result stands; only its profile is lost
        log.warning("mwnotebook: profile summary lost: %s", exc)
        return result, ProfileSummary(request, run, lost=exc.last_cause() or str(exc).splitlines()[0])
    return result, read_summary(request, run, finished, names)
