"""Where a worker's TensorFlow Python log records go: the worker's stderr, at a script's level.

TensorFlow gives its logger (``tf.get_logger()``, tensorflow/python/platform/tf_logging.py) one
``StreamHandler`` bound to the stream of the moment it is first asked for: ``sys.stdout`` in an
interactive shell, ``sys.stderr`` otherwise, with level INFO when interactive. Measured in two-worker
clusters running a tf_keras ``fit(verbose=1)`` with a slow ``on_train_batch_end``:

- an exec'd worker imports TensorFlow inside IPython, so the handler writes to the kernel's stdout,
  and "WARNING:tensorflow:Callback method `on_train_batch_end` is slow ..." landed in the middle of
  the progress bar's ``\\r``-updated stdout line;
- a forked worker's template imported TensorFlow before IPython existed, so the handler writes to
  the template's own ``sys.stderr``: the record reached the notebook only through ipykernel's
  capture of file descriptor 2 (another thread, a pipe, no order with the cell's other output).

Here TensorFlow's own handler is replaced by one that writes each record to ``sys.stderr`` *as it
is when the record is emitted* (the running kernel's stderr stream in both kinds of worker, which
the notebook labels by worker like any other stderr), and the level is the one a script gets
(WARNING: an interactive shell's INFO would print lines such as "Collective all_reduce tensors:
..." that the same code run as a script does not; ``tf.get_logger().setLevel("INFO")`` in a cell
brings them back).
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType

from mwnotebook.processes.runtime.after_import import patch_when_imported

LOGGER = "tensorflow"


class StderrNow(logging.Handler):
    """Writes each record to whatever ``sys.stderr`` is when the record is emitted."""

    mwnotebook_stderr = True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            stream = sys.stderr
            stream.write(text + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def route_to_stderr(logger: logging.Logger) -> None:
    """Replace the logger's plain stream handlers (TensorFlow's own) by :class:`StderrNow`,
    keeping their format and level; handlers the user added (any other class) stay. Idempotent."""
    for handler in list(logger.handlers):
        if type(handler) is logging.StreamHandler:
            routed = StderrNow(handler.level)
            routed.setFormatter(handler.formatter)
            logger.removeHandler(handler)
            logger.addHandler(routed)


def patch_tensorflow(tensorflow: ModuleType) -> None:
    """Level and route the logger of an imported ``tensorflow`` (the after-import patch)."""
    get_logger = getattr(tensorflow, "get_logger", None)
    # Ask TensorFlow for its logger now, so that its handler exists and its interactive level is
    # set before the level below (it is made on first request, which may not have happened yet).
    logger = get_logger() if callable(get_logger) else logging.getLogger(LOGGER)
    logger.setLevel(logging.WARNING)
    route_to_stderr(logger)


def install() -> None:
    """Route and level TensorFlow's logger when TensorFlow is imported, or now if it already is
    (here, or in the worker template this process was forked from)."""
    patch_when_imported(LOGGER, patch_tensorflow)
