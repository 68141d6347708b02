"""Metric values as ``mw.report`` receives them, and as they are sent: plain numbers at flush time.

Values may be Python or numpy numbers, eager tensors, variables (snapshotted when reported, read at
flush time), symbolic tensors (while a ``tf.function`` is traced: reported via ``tf.py_function``)
or :class:`_Lazy` values computed from tensors at flush time. TensorFlow is never imported here.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from mwnotebook.shared.metrics import encode_float

log = logging.getLogger(__name__)


class _Lazy:
    """A value computed from tensors at flush time (e.g. ``total / count``), not at report time."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., float], *args: Any) -> None:
        self.fn = fn
        self.args = args

    def resolve(self) -> float:
        return self.fn(*(_to_number(a) for a in self.args))


def _to_number(value: Any) -> Any:
    """A plain Python number from a float, numpy scalar, size-1 array or (eager) tensor."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, _Lazy):
        return value.resolve()
    if _kind(value) in (_EAGER, _VARIABLE):
        value = value.numpy()
    item = getattr(value, "item", None)  # numpy scalars and size-1 arrays
    if item is not None:
        try:
            return item()
        except ValueError as exc:
            raise ValueError(f"metric values must be scalars, got shape {value.shape}") from exc
    return float(value)


def _json_value(value: Any) -> Any:
    """JSON-safe number (or string) for a record; ``None`` with a warning when not convertible."""
    try:
        value = _to_number(value)
    except (TypeError, ValueError) as exc:  # a bad metric must not break the training loop
        log.warning("mwnotebook.worker.report: dropped a value that is not a number: %s", exc)
        return None
    if isinstance(value, float):
        return encode_float(value)
    return value


def _tf() -> Any:
    """TensorFlow if this process already imported it (report never imports it itself)."""
    return sys.modules.get("tensorflow")


_PLAIN, _EAGER, _VARIABLE, _GRAPH = "plain", "eager", "variable", "graph"
_KINDS: dict[type, str] = {bool: _PLAIN, int: _PLAIN, float: _PLAIN, type(None): _PLAIN}


def _kind(value: Any) -> str:
    """How a value must be handled, cached per type (``report`` runs every training step)."""
    cls = type(value)
    kind = _KINDS.get(cls)
    if kind is None:
        tf = _tf()
        if cls.__name__ == "EagerTensor":
            kind = _EAGER  # concrete already; converted at flush time
        elif tf is not None and isinstance(value, tf.Variable):
            kind = _VARIABLE  # may change before the flush: snapshot it
        elif tf is not None and isinstance(value, tf.Tensor):
            kind = _GRAPH  # a symbolic tensor: we are tracing a tf.function
        else:
            kind = _PLAIN  # numbers, numpy scalars, _Lazy, ...
        _KINDS[cls] = kind
    return kind


def _snapshot(value: Any) -> Any:
    """Freeze a variable's current value without a device sync (a tensor, read at flush time)."""
    return value.read_value() if _kind(value) == _VARIABLE else value


def _needs_graph(values: Any) -> bool:
    """True while tracing a tf.function: the values are symbolic and must go via py_function."""
    graph = False
    for value in values:
        kind = _kind(value)
        if kind == _GRAPH or (kind == _VARIABLE and _tf().inside_function()):
            graph = True
    return graph
