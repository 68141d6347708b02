"""The one exception hierarchy of mwnotebook.

::

    MWNotebookError                 base of everything mwnotebook raises on purpose
    ├── ConfigError                 bad options, caught before any process starts (also a ValueError)
    ├── ClusterStartError           a worker could not be started or did not become ready
    ├── ClusterStateError           an operation that needs a running cluster found none
    └── ClusterRunError             a cell failed on the cluster; ``failures`` lists each worker's fault
        ├── WorkerError             a worker's cell raised (``ename``, ``evalue``, ``traceback``)
        ├── WorkerDiedError         a worker process died (``exit_description`` names the signal)
        ├── ClusterTimeoutError     the cell ran past ``--timeout``
        └── ClusterInterrupted      the user interrupted the cell (Ctrl-C, the notebook's stop button)

Every failure carries the worker index first, because "which worker?" is the first question a
distributed traceback raises. Messages never contain connection-file contents or signing keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


class ClusterStateError(MWNotebookError):
    """The operation needs a running cluster (or a stopped one) and found the other."""


@dataclass
class WorkerFailure:
    """What went wrong on one worker during a cell."""

    worker: int
    kind: str  # "error" | "died" | "timeout" | "unresponsive" | "interrupted"
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    exit_description: str = ""
    hint: str = ""

    def headline(self) -> str:
        if self.kind == "error":
            text = f"worker {self.worker} raised {self.ename}: {self.evalue}"
        elif self.kind == "died":
            text = f"worker {self.worker} died ({self.exit_description or 'exited'})"
        elif self.kind == "timeout":
            text = f"worker {self.worker} was still running at the deadline"
        elif self.kind == "unresponsive":
            detail = f" ({self.exit_description})" if self.exit_description else ""
            text = (f"worker {self.worker} did not respond to an interrupt{detail}: it is frozen or "
                    "blocked in native code")
        else:
            text = f"worker {self.worker} was interrupted"
        return f"{text}. {self.hint}" if self.hint else text


class ClusterRunError(MWNotebookError):
    """A cell failed on the cluster. ``failures[0]`` is the first fault seen (the likely cause)."""

    def __init__(self, failures: list[WorkerFailure], restarted: bool, detail: str = "") -> None:
        self.failures = list(failures)
        self.restarted = restarted
        first = self.failures[0] if self.failures else None
        self.worker = first.worker if first else None
        self.ename = first.ename if first else ""
        self.evalue = first.evalue if first else ""
        self.traceback = first.traceback if first else []
        super().__init__(self._message(detail))

    def _render_traceback_(self) -> list[str]:
        """How IPython shows this error: the failing worker's own traceback first, then the rest."""
        red, reset = "\x1b[0;31m", "\x1b[0m"
        lines: list[str] = []
        for i, failure in enumerate(self.failures):
            lines.append(f"{red}[worker {failure.worker}] {failure.headline()}{reset}")
            if i == 0 and failure.traceback:
                lines.extend(failure.traceback)
        if self.restarted:
            lines.append("The worker kernels are being restarted: the next cell starts from fresh workers.")
        lines.append(f"{red}{type(self).__name__}{reset}: {self.failures[0].headline() if self.failures else ''}")
        return lines

    def _message(self, detail: str) -> str:
        lines = [f.headline() for f in self.failures]
        if detail:
            lines.insert(0, detail)
        if self.restarted:
            lines.append("The worker kernels are being restarted: the next cell starts from fresh workers "
                         "(variables defined in earlier cells are gone).")
        return "\n".join(lines)


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
