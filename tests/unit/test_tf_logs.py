"""TensorFlow's log handler is swapped for one that follows ``sys.stderr`` (processes/runtime/tf_logs.py).

Pure logging: a stand-in logger with a handler made the way tensorflow/python/platform/tf_logging.py
makes its own (a plain ``StreamHandler`` on the stream of that moment).
"""

from __future__ import annotations

import io
import logging
import sys
import types

from mwnotebook.processes.runtime import tf_logs


def _tf_like_logger(name: str, stream: io.StringIO) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.handlers.clear()
    logger.propagate = False
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT, None))
    logger.addHandler(handler)
    return logger


def test_records_go_to_the_stderr_of_the_moment_not_the_stream_bound_at_first_use(monkeypatch):
    first, later, bound = io.StringIO(), io.StringIO(), io.StringIO()
    logger = _tf_like_logger("mw-test-tf-a", bound)
    user = logging.FileHandler("/dev/null")  # a handler the user added: any other class stays
    logger.addHandler(user)
    tf_logs.route_to_stderr(logger)
    tf_logs.route_to_stderr(logger)  # idempotent
    monkeypatch.setattr(sys, "stderr", first)
    logger.warning("one")
    monkeypatch.setattr(sys, "stderr", later)  # e.g. the kernel's stream, set after the fork
    logger.warning("two")
    assert first.getvalue() == "WARNING:mw-test-tf-a:one\n" and later.getvalue() == "WARNING:mw-test-tf-a:two\n"
    assert bound.getvalue() == ""
    assert sum(isinstance(h, tf_logs.StderrNow) for h in logger.handlers) == 1 and user in logger.handlers
    user.close()


def test_the_patch_asks_tensorflow_for_its_logger_then_sets_a_scripts_level(monkeypatch):
    stream = io.StringIO()

    def get_logger() -> logging.Logger:  # as TensorFlow's, in an interactive shell: INFO
        logger = _tf_like_logger("mw-test-tf-b", stream)
        logger.setLevel(logging.INFO)
        return logger
    tf_logs.patch_tensorflow(types.SimpleNamespace(get_logger=get_logger))  # type: ignore[arg-type]
    logger = logging.getLogger("mw-test-tf-b")
    assert logger.level == logging.WARNING
    assert [type(h) for h in logger.handlers] == [tf_logs.StderrNow]
