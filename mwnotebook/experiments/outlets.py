"""Where a run is sent besides the history (TensorBoard event files, MLflow), and what the user is
told when it could not be: one line naming what was not recorded, why, and the one command that
sends it again (the run stays in the history, nothing measured is lost)."""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass

from mwnotebook.errors import ConfigError
from mwnotebook.experiments import mlflow_log, tensorboard
from mwnotebook.experiments.history import RunHistory, RunRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outlets:
    """``--tensorboard DIR`` and ``--mlflow [EXPERIMENT]`` of a magic line (None: not asked for;
    an empty experiment: the environment's or MLflow's default)."""

    tensorboard: str | None = None
    mlflow: str | None = None

    def __bool__(self) -> bool:
        return self.tensorboard is not None or self.mlflow is not None

    def check(self) -> None:
        """Refuse, before anything starts, what cannot work in this kernel at all."""
        if self.tensorboard is not None:
            if not self.tensorboard.strip():
                raise ConfigError("--tensorboard needs a directory: --tensorboard DIR")
            if not mlflow_log.installed("tensorboard"):
                raise ConfigError("--tensorboard needs the tensorboard package, which is not installed in "
                                  "this kernel's Python: pip install 'mwnotebook[tensorboard]' (TensorFlow "
                                  "itself is not loaded for it), then restart the kernel")
        if self.mlflow is not None:
            mlflow_log.require()

    def options(self) -> str:
        """These outlets as magic options (for the command that sends a run again)."""
        parts = []
        if self.tensorboard is not None:
            parts.append(f"--tensorboard {shlex.quote(self.tensorboard)}")
        if self.mlflow is not None:
            parts.append("--mlflow" + (f" {shlex.quote(self.mlflow)}" if self.mlflow else ""))
        return " ".join(parts)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def send(history: RunHistory, number: int, outlets: Outlets) -> tuple[RunRecord, str | None]:
    """Send run ``number`` to ``outlets``; returns the run as now kept and the one line to show when
    something was not recorded (None when all went)."""
    record = history.get(number)
    metrics = history.metrics(number)
    logged = dict(record.logged)
    missed: list[str] = []
    failed = Outlets()
    if outlets.tensorboard is not None:
        try:
            logged["tensorboard"] = str(tensorboard.write_run(record, metrics, outlets.tensorboard))
        except Exception as exc:  # whatever it is, the run is kept and the user told once
            log.debug("TensorBoard writer failed", exc_info=True)
            missed.append(f"TensorBoard ({outlets.tensorboard}: {_reason(exc)})")
            failed = Outlets(tensorboard=outlets.tensorboard)
    if outlets.mlflow is not None:
        try:
            logged["mlflow"] = mlflow_log.log_run(record, metrics, outlets.mlflow)
        except Exception as exc:
            log.debug("MLflow logging failed", exc_info=True)
            missed.append(f"MLflow at {mlflow_log.tracking_uri()} ({_reason(exc)})")
            failed = Outlets(tensorboard=failed.tensorboard, mlflow=outlets.mlflow)
    record = history.update(number, logged=logged, not_logged=tuple(missed))
    if not missed:
        return record, None
    return record, (f"mwnotebook: run {number} was not recorded in {' nor '.join(missed)}; it is kept in "
                    f"the run history, send it again with: %mwruns --log {number} {failed.options()}")
