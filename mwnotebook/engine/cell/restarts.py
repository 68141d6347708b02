"""``--max-restarts K``: run a cell again on fresh workers when it failed because workers were lost.

The policy, in one place:

* **What counts as lost** (:func:`lost_worker`): the cell's cause (the first of the verdict's
  failures, ordered by :func:`mwnotebook.errors.order_failures`) is a worker process that died
  (killed, ``os._exit``, its host's connection gone), a worker that ignored its interrupt (frozen,
  stopped), or -- with no other cause -- TensorFlow's error for a peer it can no longer reach
  (``UnavailableError``, ``AbortedError``, ``DeadlineExceededError``: a host that dropped off the
  network). Never when the user's code raised on its own, on an interrupt, or at ``--timeout``.
* **How often**: at most ``max_restarts`` restarts per cell; a cell that keeps killing its own
  worker uses them up and fails with every attempt listed (it never loops).
* **Hosts that stay away**: if fresh workers cannot be started (a host unreachable, a start that
  fails), starting is tried again with a growing pause for at most ``host_wait`` seconds; then the
  cell ends with that reason (:class:`~mwnotebook.errors.RestartFailedError`) instead of using up
  the remaining restarts. These retries do not count as restarts. A start that says trying again
  cannot help (:class:`~mwnotebook.errors.CannotRestartError`) ends the cell at once.
* **Where workers come back** is the launcher's business; when not in place (a Slurm node lost),
  the restart's ``moved`` lines say where.

The loop (:func:`run_with_restarts`) is pure logic over three callables -- run the cell once, start
fresh workers, pass an event on -- so the unit tests drive it with fakes
(tests/unit/test_restarts.py) and :class:`~mwnotebook.engine.async_cluster.AsyncCluster` with
its real workers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mwnotebook.config.spec import check_max_restarts
from mwnotebook.engine.cell.result import RunResult
from mwnotebook.engine.cell.run import CellVerdict
from mwnotebook.errors import AttemptFailure, CannotRestartError, ClusterRunError, RestartFailedError, WorkerFailure
from mwnotebook.shared.events import Event, EventSink, RunRestarted, WorkerMetrics

log = logging.getLogger(__name__)

#: TensorFlow's errors for a peer that is gone or unreachable. (``CancelledError`` and
#: ``KeyboardInterrupt`` follow an interrupt: not a lost worker.)
LOST_PEER_ERRORS = frozenset({"UnavailableError", "AbortedError", "DeadlineExceededError"})
#: How long fresh workers may keep failing to start after a loss before the cell gives up.
HOST_WAIT_SECONDS = 60.0
#: First pause between two tries to start fresh workers (doubled each time, at most 8 s).
FIRST_RETRY_PAUSE = 0.5


def lost_worker(verdict: CellVerdict) -> WorkerFailure | None:
    """The failure that says workers were lost, or None when the cell failed for another reason."""
    if verdict.ok or verdict.trigger in ("interrupted", "timeout") or not verdict.failures:
        return None
    cause = verdict.failures[0]
    if cause.kind in ("died", "unresponsive"):
        return cause
    if cause.kind == "error" and cause.ename in LOST_PEER_ERRORS:
        return cause
    return None


@dataclass(frozen=True)
class CellLimits:
    """A cell's deadline per attempt and its restart count, checked once where they enter the
    engine (:meth:`of`, called by ``Cluster.run`` and ``AsyncCluster.run``) and passed down as they are."""

    timeout: float | None
    max_restarts: int

    @classmethod
    def of(cls, timeout: float | None, max_restarts: int | None, spec_max_restarts: int) -> CellLimits:
        """The limits of one run: ``max_restarts`` None takes the spec's (checked by ``ClusterSpec``)."""
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        count = spec_max_restarts if max_restarts is None else check_max_restarts(max_restarts, "max_restarts")
        return cls(timeout, count)


@dataclass
class Progress:
    """The last epoch and step any worker reported in the current attempt (for the restart line)."""

    epoch: int | None = None
    step: float | None = None

    def see(self, event: Event) -> None:
        if not isinstance(event, WorkerMetrics):
            return
        for record in event.records:
            epoch, step = record.get("epoch"), record.get("step")
            if isinstance(epoch, int) and not isinstance(epoch, bool):
                self.epoch = epoch if self.epoch is None else max(self.epoch, epoch)
            if isinstance(step, (int, float)) and not isinstance(step, bool):
                self.step = float(step) if self.step is None else max(self.step, float(step))


@dataclass
class RestartOutcome:
    """What :func:`run_with_restarts` ends with: the last attempt's verdict, every attempt's result."""

    verdict: CellVerdict
    results: list[RunResult] = field(default_factory=list)
    restarts: list[RunRestarted] = field(default_factory=list)
    attempts: list[AttemptFailure] = field(default_factory=list)
    #: Set when fresh workers could not be started: the cell ends with this error.
    start_error: ClusterRunError | None = None


def _where(progress: Progress) -> str:
    if progress.epoch is not None:
        return f" at epoch {progress.epoch + 1}"
    if progress.step is not None:
        return f" at step {progress.step:g}"
    return ""


#: What starting fresh workers may say: where workers moved (lines), or nothing.
Restart = Callable[[], Awaitable["list[str] | None"]]


async def _start_fresh(restart: Restart, host_wait: float, clock: Callable[[], float],
                       aborted: Callable[[], bool]) -> tuple[BaseException | None, list[str]]:
    """Start fresh workers, trying again for ``host_wait`` s; the last error if it never worked,
    and where workers moved."""
    give_up = clock() + host_wait
    pause = FIRST_RETRY_PAUSE
    while True:
        if aborted():
            return None, []  # the cell's next attempt ends at once as interrupted
        try:
            return None, list(await restart() or [])
        except asyncio.CancelledError:
            raise
        except CannotRestartError as exc:
            return exc, []
        except Exception as exc:  # a host that is away, a start that failed: try again for a while
            log.info("fresh workers did not start (%s); trying again", exc)
            if clock() + pause > give_up:
                return exc, []
            await asyncio.sleep(pause)
            pause = min(pause * 2, 8.0)


async def run_with_restarts(run_once: Callable[[EventSink], Awaitable[CellVerdict]],
                            restart: Restart, emit: EventSink, max_restarts: int,
                            host_wait: float = HOST_WAIT_SECONDS,
                            clock: Callable[[], float] = time.monotonic,
                            aborted: Callable[[], bool] = lambda: False) -> RestartOutcome:
    """Run the cell; after a lost worker start fresh ones and run it again, at most ``max_restarts`` times.

    ``run_once(sink)`` runs the cell once on the current workers, passing its events to ``sink``;
    ``restart()`` replaces every worker (raises when they cannot be started; returns the lines
    saying where workers moved, if they did not come back in place). ``emit`` gets every
    event plus one :class:`RunRestarted` per restart. ``aborted()`` true (the user interrupted):
    no further restart. ``max_restarts`` was checked where it entered (:class:`CellLimits`).
    """
    outcome: RestartOutcome | None = None
    results: list[RunResult] = []
    restarts: list[RunRestarted] = []
    attempts: list[AttemptFailure] = []
    while True:
        progress = Progress()

        def sink(event: Event, progress: Progress = progress) -> None:
            progress.see(event)
            emit(event)

        verdict = await run_once(sink)
        results.append(verdict.result)
        cause = lost_worker(verdict)
        if cause is None or len(restarts) >= max_restarts or aborted():
            outcome = RestartOutcome(verdict, results, restarts, attempts)
            break
        lost_at_wall, lost_at = time.time(), clock()
        error, moved = await _start_fresh(restart, host_wait, clock, aborted)
        if aborted():  # interrupted while restarting: the cell ends with the loss it had
            outcome = RestartOutcome(verdict, results, restarts, attempts)
            break
        seconds = clock() - lost_at
        headline = cause.headline()
        attempts.append(AttemptFailure(len(attempts) + 1, headline + _where(progress), tuple(verdict.failures),
                                       None if error is not None else seconds))
        if error is not None:
            detail = (f"the workers were lost ({headline}) and cannot be started again: {error}"
                      if isinstance(error, CannotRestartError) else
                      f"the workers were lost ({headline}) and could not be started again within "
                      f"{host_wait:g} s: {error}")
            failed = RestartFailedError(verdict.failures, restarted=False, detail=detail, attempts=attempts[:-1])
            outcome = RestartOutcome(verdict, results, restarts, attempts, start_error=failed)
            break
        event = RunRestarted(restart=len(restarts) + 1, max_restarts=max_restarts, cause=headline,
                             worker=cause.worker, epoch=progress.epoch, step=progress.step,
                             lost_at=lost_at_wall, restart_seconds=seconds, moved=tuple(moved))
        restarts.append(event)
        emit(event)
    return outcome
