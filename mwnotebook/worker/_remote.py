"""``RemoteValue``s in ``mw.report``: what a ``--ps`` coordinator gets back from ``coordinator.schedule``.

Under ``ParameterServerStrategy`` the cell runs in the coordinator only; the step function runs on
a worker server and its return value comes back as one ``RemoteValue`` that is ready once the
closure ran there. ``mw.report`` cannot run inside the step function (a ``tf.py_function`` there
would run on the server, not in this process), so the coordinator reports the ``RemoteValue``s::

    @tf.function
    def step_fn(iterator):
        ...
        return {"loss": loss,
                "worker": tf.distribute.coordinator.experimental_get_current_worker_index()}

    for step in range(steps):
        result = coordinator.schedule(step_fn, args=(per_worker_iterator,))
        mw.report(step=step, scheduled=result)

The ``worker`` entry names the worker server that computed the values: the notebook draws them as
that server's curve. ``mw.report(step=i, worker=w, loss=rv)`` says the same with separate values.

Cost model: nothing here waits for a closure. A record holding a RemoteValue that is not ready yet
stays in the reporter's buffer (worker/_report.py) and is published by a later flush once it is;
readiness is checked without blocking. TensorFlow has no public non-blocking check, so it is read
from ``RemoteValueImpl``'s completion event (TF 2.21 ``distribute/coordinator/values.py``); where
that is missing, a value counts as ready and :func:`resolve` fetches it (blocking) only at flush
time, never in ``report``. A closure that was aborted or failed makes its record dropped (logged by
the reporter), never an error in the training loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

#: The key under which ``report(scheduled=...)`` keeps its RemoteValue until it is fetched.
SCHEDULED = "scheduled"
#: The record key of the worker server that computed a record (the notebook's chart/lines.py).
SERVER = "server"

READY, WAITING, FAILED = "ready", "waiting", "failed"


class DroppedValue(Exception):
    """A RemoteValue whose closure was aborted or failed: its record is dropped."""


#: Per type: is it a RemoteValue? (``report`` checks every value of every step: one lookup then.)
_REMOTE_TYPES: dict[type, bool] = {}


def is_remote(value: Any) -> bool:
    """True for a ``RemoteValue`` (duck-typed: TensorFlow is not imported here)."""
    cls = type(value)
    known = _REMOTE_TYPES.get(cls)
    if known is None:
        known = _REMOTE_TYPES[cls] = hasattr(cls, "fetch") and any(
            base.__name__ == "RemoteValue" for base in cls.__mro__)
    return known


def _remotes(step: Any, values: Mapping[str, Any]) -> Iterator[Any]:
    if is_remote(step):
        yield step
    for value in values.values():
        if is_remote(value):
            yield value


def has_remote(step: Any, values: Mapping[str, Any]) -> bool:
    return next(_remotes(step, values), None) is not None


def state(value: Any) -> str:
    """:data:`READY`, :data:`WAITING` (the closure has not run yet) or :data:`FAILED` (aborted, or
    its function raised), without waiting."""
    event = getattr(value, "_status_available_event", None)
    if event is None:
        return READY  # another RemoteValue implementation: fetched (blocking) at flush time
    if not event.is_set():
        return WAITING
    if getattr(getattr(value, "_status", None), "name", "") == "ABORTED" or getattr(value, "_error", None):
        return FAILED
    return READY


def record_state(step: Any, values: Mapping[str, Any]) -> str:
    """The state of a record: failed if any of its RemoteValues failed, else waiting if any waits."""
    states = {state(v) for v in _remotes(step, values)}
    return FAILED if FAILED in states else WAITING if WAITING in states else READY


def wait(records: Iterable[tuple[Any, Mapping[str, Any]]], deadline: float,
         clock: Any = time.monotonic) -> bool:
    """Wait until every RemoteValue of ``records`` is ready or failed, at most until ``deadline``
    (a ``clock()`` time); False when some are still waiting then."""
    for step, values in records:
        for value in _remotes(step, values):
            event = getattr(value, "_status_available_event", None)
            if event is None:
                continue
            left = deadline - clock()
            if left <= 0 or not event.wait(left):
                return False
    return True


def _fetch(value: Any) -> Any:
    try:
        return value.fetch()
    except Exception as exc:  # aborted, the step function raised, the worker was lost
        raise DroppedValue(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc


def resolve(step: Any, values: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The record with its RemoteValues fetched (numbers or numpy values), ``scheduled`` expanded
    into its metrics and ``worker`` into :data:`SERVER`. Raises :class:`DroppedValue`."""
    if is_remote(step):
        step = _fetch(step)
    out: dict[str, Any] = {}
    for name, value in values.items():
        if is_remote(value):
            value = _fetch(value)
        if name == SCHEDULED:
            out.update(_expand(value))
        else:
            out[name] = value
    return step, out


def _expand(value: Any) -> dict[str, Any]:
    """A fetched ``scheduled`` value: a dict of metrics, ``worker`` naming the worker server."""
    if not isinstance(value, Mapping):
        raise DroppedValue(f"report(scheduled=...) needs a step function that returns a dict, e.g. "
                           f"{{'loss': loss, 'worker': ...}}; it returned {type(value).__name__}")
    out = {}
    for name, item in value.items():
        out[SERVER if name == "worker" else str(name)] = item
    return out
