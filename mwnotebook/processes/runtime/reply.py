"""A worker's per-cell bookkeeping, carried by the execute_reply itself, and what a no-op cell costs.

Measured in a forked TensorFlow worker (``benchmarks/probes/noop_breakdown.py``): ipykernel evaluating and
formatting two ``user_expressions`` per cell (the output count of :mod:`.output` and the hold check of
``mwnotebook/worker/_lifetime.py``) took ~0.4 ms, more than IPython running ``pass`` (~0.1 ms). With
N workers sharing few cores, that is paid N times per cell. So the worker puts both answers into the
execute_reply's metadata (``metadata["mwnotebook"]``: ``written`` per stream, ``settle``) as plain
values, and the notebook stops asking through expressions once it has seen that metadata
(``mwnotebook/engine/workers/worker.py``). A worker without this module (a remote host with an older
mwnotebook) keeps answering the expressions.

Four more per-request costs of ipykernel are dropped here, each safe because the notebook reads
every request's IOPub output until that request's ``idle`` (which ipykernel sends after all of it):

- the flush of stdout and stderr before each reply is a round trip to the I/O thread each, even
  when nothing was written: a flush with nothing buffered returns at once;
- the 0.5 ms ``time.sleep`` ipykernel makes before every reply (``Kernel._execute_sleep``, a
  work-around so that the last output is sent before the reply).

- the ``execute_input`` message (the request's own code, echoed on IOPub for other frontends: a
  worker's only client is the notebook that sent the code, and it ignores the echo), and the
  ``busy`` status before each request (the notebook waits for ``idle`` only). With 32 workers on
  2 cores each IOPub message costs the notebook's event loop ~0.1-0.3 ms per worker and cell.

And one of traitlets: the kernel's logger is at DEBUG while its only handler shows WARNING and up,
so ipykernel's four ``log.debug`` calls per request each built a ``LogRecord`` that was then thrown
away. The logger gets its handlers' level (what is shown stays the same).

Installed by the set-up code every worker runs after it starts (``mwnotebook/engine/workers/bootstrap.py``).
"""
# ruff: noqa: SLF001 -- this module patches ipykernel's own per-request methods (private by name)

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from mwnotebook.processes.runtime import output

log = logging.getLogger(__name__)

#: The key of the reply metadata this module adds.
METADATA_KEY = "mwnotebook"
_LIFETIME_MODULE = "mwnotebook.worker._lifetime"


def cell_metadata(parent: dict[str, Any]) -> dict[str, Any]:
    """What the notebook needs to know at the end of request ``parent``.

    For a cell: characters written per stream, and whether replaced objects must be released
    between cells (False when nothing is held: the lifetime module is not even loaded). For a
    silent request only the marker that this worker reports here.
    """
    content = parent.get("content") or {}
    if content.get("silent"):
        return {}
    lifetime = sys.modules.get(_LIFETIME_MODULE)
    settle = bool(lifetime.settle()) if lifetime is not None else False
    return {"written": output.written_for(parent.get("header", {}).get("msg_id", "")), "settle": settle}


def _patch_finish_metadata() -> None:
    from ipykernel.ipkernel import IPythonKernel

    if getattr(IPythonKernel.finish_metadata, "_mw_reply", False):
        return
    original: Callable[..., Any] = IPythonKernel.finish_metadata

    def finish_metadata(self: Any, parent: Any, metadata: Any, reply_content: Any) -> Any:
        metadata = original(self, parent, metadata, reply_content)
        try:
            metadata[METADATA_KEY] = cell_metadata(parent)
        except Exception:  # the notebook then treats the cell's bookkeeping as unknown
            log.debug("no mwnotebook reply metadata", exc_info=True)
        return metadata

    finish_metadata._mw_reply = True  # type: ignore[attr-defined]
    IPythonKernel.finish_metadata = finish_metadata  # type: ignore[method-assign]


def _has_nothing_to_flush(stream: Any) -> bool:
    if stream._flush_pending or stream._subprocess_flush_pending:
        return False
    with stream._buffer_lock:
        return not any(buffer.tell() for buffer in stream._buffers.values())


def _patch_idle_flush() -> None:
    from ipykernel.iostream import OutStream

    if getattr(OutStream.flush, "_mw_quiet", False):
        return
    original: Callable[..., Any] = OutStream.flush

    def flush(self: Any) -> None:
        try:
            if _has_nothing_to_flush(self):
                return
        except AttributeError:  # an ipykernel with other internals: always flush
            pass
        original(self)

    flush._mw_quiet = True  # type: ignore[attr-defined]
    OutStream.flush = flush  # type: ignore[method-assign]


def _no_echo(*_args: Any, **_kwargs: Any) -> None:
    """In place of ipykernel's ``_publish_execute_input``."""


def _idle_only(publish: Any) -> Any:
    """ipykernel's ``_publish_status`` without the ``busy`` of shell requests."""
    def publish_status(status: str, channel: str, parent: Any = None) -> Any:
        if status == "busy" and channel == "shell":
            return None
        return publish(status, channel, parent)

    publish_status._mw_idle_only = True  # type: ignore[attr-defined]
    return publish_status


def _log_at_shown_level(logger: Any) -> None:
    if not isinstance(logger, logging.Logger) or not logger.handlers or logger.propagate and logger.parent \
            and logger.parent.handlers:
        return
    shown = min(handler.level for handler in logger.handlers)
    if logger.level < shown:
        logger.setLevel(shown)


def install() -> None:
    """Patch this kernel (idempotent); call from code running in it."""
    output.patch_out_stream()
    _patch_finish_metadata()
    _patch_idle_flush()
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None:
        return
    if hasattr(kernel, "_execute_sleep"):
        kernel._execute_sleep = 0.0
    if hasattr(kernel, "_publish_execute_input"):
        kernel._publish_execute_input = _no_echo
    _log_at_shown_level(getattr(kernel, "log", None))
    status = getattr(kernel, "_publish_status", None)
    if status is not None and not getattr(status, "_mw_idle_only", False):
        kernel._publish_status = _idle_only(status)
