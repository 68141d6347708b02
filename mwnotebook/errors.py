"""The one exception hierarchy of mwnotebook.

::

    MWNotebookError                 base of everything mwnotebook raises on purpose
    ├── ConfigError                 bad options, caught before any process starts (also a ValueError)
    ├── ClusterStartError           a worker could not be started or did not become ready
    │   └── CannotRestartError      fresh workers cannot be started at all (trying again will not help)
    ├── ClusterStateError           an operation that needs a running cluster found none
    └── ClusterRunError             a cell failed on the cluster; ``failures`` lists each worker's fault
        ├── WorkerError             a worker's cell raised (``ename``, ``evalue``, ``traceback``)
        ├── WorkerDiedError         a worker process died (``exit_description`` names the signal)
        ├── ClusterTimeoutError     the cell ran past ``--timeout``
        ├── ClusterInterrupted      the user interrupted the cell (Ctrl-C, the notebook's stop button)
        └── RestartFailedError      workers were lost and could not be started again (``--max-restarts``)

A cell run with ``--max-restarts K`` that lost workers more often than K times fails with the
last attempt's error; its ``attempts`` list every earlier attempt (:class:`AttemptFailure`), each
with its cause first, and the rendering shows them before the last attempt's failures.

Every failure carries the worker index first, because "which worker?" is the first question a
distributed traceback raises. Messages never contain connection-file contents or signing keys.

Which failure comes first -- the cause -- follows one stable rule, :func:`order_failures`: a root
cause (a worker error that is not a consequence of a peer's failure, a death, a deadline) before
an ignored interrupt, before consequences, before workers we interrupted; ties by the time the
notebook saw the fault, then by the lowest worker index. :func:`render_failures` is the one
rendering, for the notebook and for the terminal: every distinct traceback (identical ones once,
naming all their workers), consequences as one line ("worker 0 stopped: its collective lost
worker 1"). Every error pickles with all its fields, the workers' stacks included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


class MWNotebookError(Exception):
    """Base class of every error mwnotebook raises on purpose."""


class ConfigError(MWNotebookError, ValueError):
    """Bad options or input, detected before anything is started."""


class ClusterStartError(MWNotebookError):
    """A worker kernel could not be started or did not become ready in time."""

    def __init__(self, message: str, worker: int | None = None, host: str | None = None) -> None:
        super().__init__(message)
        self.worker = worker
        self.host = host

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.worker, self.host))


class CannotRestartError(ClusterStartError):
    """Fresh workers for a lost one cannot be started, and trying again will not help (say, a node
    of a Slurm job the user gave was lost and the job has no spare node): ``--max-restarts`` ends
    the cell at once with this reason instead of trying again for a while."""


class ClusterStateError(MWNotebookError):
    """The operation needs a running cluster (or a stopped one) and found the other."""


#: What went wrong on one worker (see :class:`WorkerFailure`).
FailureKind = Literal["error", "died", "timeout", "unresponsive", "consequence", "interrupted"]

#: How likely each kind of fault is the cause of a failed cell, most likely first. See
#: :func:`order_failures`.
CAUSE_RANK: dict[FailureKind, int] = {"died": 0, "error": 1, "timeout": 1, "unresponsive": 2, "consequence": 3,
                              "interrupted": 4}

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RED, _RESET = "\x1b[0;31m", "\x1b[0m"


@dataclass
class WorkerFailure:
    """What went wrong on one worker during a cell.

    ``kind`` is one of ``error`` (the cell raised), ``died`` (the process ended), ``timeout`` (still
    running at the deadline), ``unresponsive`` (ignored its interrupt: frozen or stuck in native
    code), ``consequence`` (stopped because of ``peer``'s fault, e.g. a collective that lost its
    peer) and ``interrupted`` (stopped by mwnotebook or the user).
    """

    worker: int
    kind: FailureKind
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    exit_description: str = ""
    hint: str = ""
    #: For ``consequence``: the worker whose fault this one follows from.
    peer: int | None = None
    #: Seconds after the cell started when the notebook saw this fault (orders ties).
    seen_at: float = 0.0
    #: What the kernel is called when it is not a plain replica (``coordinator``, ``evaluator``:
    #: config/roles.py ``kernel_names``); empty: ``worker <i>``.
    name: str = ""

    @property
    def who(self) -> str:
        """Who failed, as the messages say it: the task's name, else ``worker i``."""
        return self.name or f"worker {self.worker}"

    def headline(self) -> str:
        """One line: which worker, what happened (and the hint, if there is one)."""
        return _headline(self, self.who)

    def same_error(self, other: WorkerFailure) -> bool:
        """Whether two workers raised the same thing (shown once, with both workers named)."""
        return (self.kind, self.ename, self.evalue, self.traceback) == \
            (other.kind, other.ename, other.evalue, other.traceback)


def _headline(f: WorkerFailure, who: str) -> str:
    if f.kind == "error":
        text = f"{who} raised {f.ename}: {f.evalue}"
    elif f.kind == "died":
        text = f"{who} died ({f.exit_description or 'exited'})"
    elif f.kind == "timeout":
        text = f"{who} was still running at the deadline"
    elif f.kind == "unresponsive":
        detail = f" ({f.exit_description})" if f.exit_description else ""
        text = f"{who} did not respond to an interrupt{detail}: it is frozen or blocked in native code"
    elif f.kind == "consequence":
        peer = f"worker {f.peer}" if f.peer is not None else "a peer"
        if f.ename:
            text = f"{who} stopped: its collective lost {peer} ({f.ename})"
        else:
            text = f"{who} stopped: it was waiting in a collective for {peer} and ignored the interrupt"
    else:
        text = f"{who} was interrupted"
    return f"{text}. {f.hint}" if f.hint else text


def order_failures(failures: list[WorkerFailure]) -> list[WorkerFailure]:
    """The failures with the most likely cause first. The rule, stable for the same faults:

    1. by kind (:data:`CAUSE_RANK`): a dead process, then a real error or a deadline, then a worker
       that ignored its interrupt, then consequences of a peer's fault, then workers that were
       interrupted -- a root cause is a fault that is not a consequence of another worker's;
    2. among equals, the fault the notebook saw first (``seen_at``);
    3. then the lowest worker index.
    """
    return sorted(failures, key=lambda f: (CAUSE_RANK.get(f.kind, len(CAUSE_RANK)), f.seen_at, f.worker))


def group_failures(failures: list[WorkerFailure]) -> list[list[WorkerFailure]]:
    """Identical errors of several workers grouped (in order of first appearance)."""
    groups: list[list[WorkerFailure]] = []
    for failure in failures:
        for group in groups:
            if group[0].kind == "error" and group[0].same_error(failure):
                group.append(failure)
                break
        else:
            groups.append([failure])
    return groups


def render_failures(failures: list[WorkerFailure], *, restarted: bool = False, terminal: bool = False,
                    color: bool = True) -> list[str]:
    """The one rendering of a failed cell, for the notebook and for the terminal.

    The cause first (``failures`` is ordered by :func:`order_failures`), then every other worker:
    each distinct error with its traceback, identical errors once with all their workers named,
    everything else (deaths, consequences, interrupts) as one line each. ``terminal`` labels
    every line for the ``mwnotebook`` command (``mwnotebook:`` headlines, ``[worker i]``
    traceback lines) and leaves out the restart note (the command stops its workers anyway).
    """
    lines: list[str] = []
    for number, group in enumerate(group_failures(failures)):
        first = group[0]
        workers = sorted(f.worker for f in group)
        who = first.who if len(workers) == 1 else "workers " + ", ".join(map(str, workers))
        headline = _headline(first, who)
        if terminal:
            lines.append(f"mwnotebook: {headline}")
        else:
            label = f"[{who}]"
            lines.append(f"{_RED}{label} {headline}{_RESET}" if color else f"{label} {headline}")
        if first.traceback and (first.kind == "error" or number == 0):
            label = f"[{who}] " if terminal else ""
            for chunk in first.traceback:
                text = chunk if color else _ANSI.sub("", chunk)
                if terminal:
                    lines.extend(label + line for line in text.splitlines())
                else:
                    lines.append(text)
    if restarted and not terminal:
        lines.append("The worker kernels are being restarted: the next cell starts from fresh workers.")
    return lines


class WorkerStacksText(Protocol):
    """Where each worker was when the cell failed (``engine/cell/stacks.py`` ``StacksReport``; it must
    pickle, as the error that carries it does)."""

    def text(self) -> str: ...


#: Heads the workers' stacks in an error's message and in what IPython shows.
STACKS_HEADING = "Worker stacks at that moment:"
@dataclass(frozen=True)
class AttemptFailure:
    """One attempt of a cell that lost workers and was restarted (see ``--max-restarts``)."""

    #: 1 for the first run of the cell, 2 for the run after the first restart, ...
    attempt: int
    #: The attempt's cause, one line (``worker 1 died (SIGKILL) at epoch 3``).
    cause: str
    failures: tuple[WorkerFailure, ...] = ()
    #: Seconds from the loss until fresh workers were ready (None: not restarted after it).
    restart_seconds: float | None = None

    def line(self) -> str:
        after = f" -> restarted in {self.restart_seconds:.1f} s" if self.restart_seconds is not None else ""
        return f"attempt {self.attempt}: {self.cause}{after}"


def render_attempts(attempts: list[AttemptFailure], last_cause: str) -> list[str]:
    """Every attempt of a cell with restarts, one line each, the cause first; the last one (whose
    failures are rendered in full below these lines) is ``last_cause``."""
    if not attempts:
        return []
    total = len(attempts) + 1
    lines = [f"The cell lost workers {total} times ({len(attempts)} restarts):"]
    lines += [f"  {a.line()}" for a in attempts]
    lines.append(f"  attempt {total}: {last_cause}")
    return lines


class ClusterRunError(MWNotebookError):
    """A cell failed on the cluster. ``failures[0]`` is the likely cause (see :func:`order_failures`).

    ``stacks``: where each worker was (taken on a timeout, and of workers that ignored their
    interrupt), or None; shown after the failures, in the message and in IPython's rendering.
    ``attempts``: the earlier attempts of a cell run with restarts (empty without).
    """

    def __init__(self, failures: list[WorkerFailure], restarted: bool, detail: str = "",
                 stacks: WorkerStacksText | None = None, attempts: list[AttemptFailure] | None = None) -> None:
        self.failures = list(failures)
        self.restarted = restarted
        self.detail = detail
        self.stacks = stacks
        self.attempts = list(attempts or [])
        first = self.failures[0] if self.failures else None
        self.worker = first.worker if first else None
        self.ename = first.ename if first else ""
        self.evalue = first.evalue if first else ""
        self.traceback = first.traceback if first else []
        super().__init__(self._message(detail))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.failures, self.restarted, self.detail, self.stacks, self.attempts))

    def with_attempts(self, attempts: list[AttemptFailure]) -> ClusterRunError:
        """This error, with the earlier attempts of its cell (``--max-restarts``) listed first."""
        self.attempts = list(attempts)
        self.args = (self._message(self.detail),)
        return self

    def last_cause(self) -> str:
        """The last attempt's cause, one line (what the attempt list ends with)."""
        return self.detail or (self.failures[0].headline() if self.failures else "failed")

    def _render_traceback_(self) -> list[str]:
        """How IPython shows this error: the failing worker's own traceback first, then the rest."""
        lines = [f"{_RED}{line}{_RESET}" for line in render_attempts(self.attempts, self.last_cause())]
        lines += render_failures(self.failures, restarted=self.restarted)
        lines.append(f"{_RED}{type(self).__name__}{_RESET}: {self.failures[0].headline() if self.failures else ''}")
        if self.stacks is not None:
            lines += [STACKS_HEADING, *self.stacks.text().splitlines()]
        return lines

    def _message(self, detail: str) -> str:
        lines = [_headline(g[0], g[0].who if len(g) == 1 else
                           "workers " + ", ".join(str(w) for w in sorted(f.worker for f in g)))
                 for g in group_failures(self.failures)]
        if detail:
            lines.insert(0, detail)
        lines[:0] = render_attempts(self.attempts, self.last_cause())
        if self.restarted:
            lines.append("The worker kernels are being restarted: the next cell starts from fresh workers "
                         "(variables defined in earlier cells are gone).")
        message = "\n".join(lines)
        if self.stacks is not None:
            message += f"\n\n{STACKS_HEADING}\n{self.stacks.text()}"
        return message


class WorkerError(ClusterRunError):
    """A worker's cell raised an exception."""


class WorkerDiedError(ClusterRunError):
    """A worker kernel process died while the cell ran."""


class ClusterTimeoutError(ClusterRunError, TimeoutError):
    """The cell did not finish on every worker before its timeout."""


class ClusterInterrupted(ClusterRunError):
    """The user interrupted the cell; all workers were interrupted too.

    Deliberately not a KeyboardInterrupt: it is raised on the background event loop, where a
    KeyboardInterrupt would stop the loop itself.
    """


class RestartFailedError(ClusterRunError):
    """Workers were lost and fresh ones could not be started again in time (say, their host stayed
    unreachable); ``detail`` says why, ``failures`` are those of the attempt that lost them."""
