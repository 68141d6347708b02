"""The HMAC signing key never appears in outputs, logs, exception texts or command lines."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from mwnotebook import Cluster, ClusterStartError, WorkerError
from testbed.processes import worker_processes

pytestmark = pytest.mark.integration


def test_signing_key_stays_secret(caplog):
    caplog.set_level(logging.DEBUG)
    cluster = Cluster(workers=2)
    try:
        cluster.start()
        keys = set()
        for worker in cluster.workers:
            key = worker.handle.connection_info["key"]
            keys.add(key.decode() if isinstance(key, bytes) else key)
        assert all(len(k) >= 32 for k in keys)
        outputs = []
        result = cluster.run("import os, sys\nprint(sorted(os.environ))\nprint(sys.argv)",
                             on_event=lambda e: outputs.append(repr(e)))
        with pytest.raises(WorkerError) as info:
            cluster.run("raise RuntimeError('boom')", on_event=lambda e: outputs.append(repr(e)))
        # The workers' own log files too (their output logs), not only this process's log records.
        worker_logs = [Path(path).read_text() for path in result.log_paths]
        assert len(worker_logs) == 2 and all("MWNOTEBOOK_WORKER_INDEX" in text for text in worker_logs), \
            result.log_paths  # the files that hold what the workers printed
        texts = [str(info.value), "\n".join(info.value._render_traceback_()), *outputs,
                 result.stdout(0), result.stdout(1), caplog.text, *worker_logs]
        texts += [" ".join(p.cmdline()) for p in worker_processes()]
        for key in keys:
            assert not any(key in text for text in texts)
    finally:
        cluster.stop()


def test_start_failure_message_has_no_key(tmp_path):
    """A worker interpreter that reads its connection file and dies: the test keeps a copy of that
    file (so it knows the key the worker was given) and the error the user sees must not hold it,
    nor the file's other secret field, while it does show the worker's own last words."""
    seen = tmp_path / "seen"
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\n"
                      "while [ $# -gt 0 ]; do [ \"$1\" = -f ] && cp \"$2\" " + str(seen) + ".$$.json; shift; done\n"
                      "echo 'cannot start' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(ClusterStartError) as info:
        Cluster(workers=1, python=str(broken), network="host").start()
    message = str(info.value)
    assert "exited during start-up (exit code 3)" in message and "cannot start" in message
    files = sorted(tmp_path.glob("seen.*.json"))
    assert files, "the broken interpreter was never given a connection file"
    for path in files:  # one per start attempt (the worker template, then the plain start)
        key = json.loads(path.read_text())["key"]
        assert len(key) >= 32, key
        assert key not in message and key not in repr(info.value)
