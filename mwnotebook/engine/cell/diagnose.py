"""Advice for errors whose raw TensorFlow text does not say what the user should do. Pure."""

from __future__ import annotations

from dataclasses import dataclass

#: Errors a worker gets *because* a peer failed or the run was stopped; never the root cause.
CONSEQUENTIAL_ERRORS = frozenset({
    "UnavailableError", "CancelledError", "AbortedError", "DeadlineExceededError", "KeyboardInterrupt",
})


@dataclass(frozen=True)
class Diagnosis:
    hint: str
    needs_restart: bool  # the worker process cannot recover in place


def diagnose(ename: str, evalue: str) -> Diagnosis | None:
    """What to tell the user about ``ename: evalue`` raised in a worker, if we know better than TF."""
    if "Collective ops must be configured at program startup" in evalue:
        return Diagnosis(
            "TensorFlow ran an op before MultiWorkerMirroredStrategy was created, which fixes the "
            "process's collectives too late. Create the strategy first, before any other TensorFlow "
            "call (tensors, datasets, models). The workers are restarted so the corrected cell can run.",
            needs_restart=True)
    if "Collective ops is aborted" in evalue:
        return Diagnosis(
            "TensorFlow aborted this process's collectives (a peer failed, or collective state from an "
            "earlier run was torn down while this one ran). The workers are restarted; run the cell again.",
            needs_restart=True)
    if ename in ("ModuleNotFoundError", "ImportError") and "tensorflow" in evalue:
        return Diagnosis(
            "TensorFlow is not installed in the worker's Python. Install it there "
            "(pip install 'mwnotebook[tensorflow]', or 'mwnotebook[tensorflow-cpu]' on machines without "
            "a GPU), or point --python at an interpreter that has it, then run %mwcluster restart.",
            needs_restart=False)
    if ename in ("ModuleNotFoundError", "ImportError") and "tf_keras" in evalue:
        return Diagnosis(
            "tf_keras is not installed in the worker's Python, but TF_USE_LEGACY_KERAS=1 needs it. "
            "pip install tf-keras there, or run with --no-legacy-keras.", needs_restart=False)
    if ename == "RuntimeError" and "TF_CONFIG" in evalue:
        return Diagnosis("Each worker's TF_CONFIG is set by mwnotebook: do not overwrite os.environ['TF_CONFIG'] "
                         "in the cell.", needs_restart=True)
    return None


def is_consequential(ename: str) -> bool:
    return ename in CONSEQUENTIAL_ERRORS
