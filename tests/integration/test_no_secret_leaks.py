"""The HMAC signing key never appears in outputs, logs, exception texts or command lines."""

from __future__ import annotations

import logging

import pytest

from mwnotebook import Cluster, ClusterStartError, WorkerError

from ..conftest import worker_processes

pytestmark = pytest.mark.integration


def test_signing_key_stays_secret(caplog):
    caplog.set_level(logging.DEBUG)
    cluster = Cluster(workers=2)
    try:
        cluster.start()
        keys = set()
        for worker in cluster._core._workers:
            key = worker.handle.connection_info["key"]
            keys.add(key.decode() if isinstance(key, bytes) else key)
        assert all(len(k) >= 32 for k in keys)
        outputs = []
        result = cluster.run("import os, sys\nprint(sorted(os.environ))\nprint(sys.argv)",
                             on_event=lambda e: outputs.append(repr(e)))
        with pytest.raises(WorkerError) as info:
            cluster.run("raise RuntimeError('boom')", on_event=lambda e: outputs.append(repr(e)))
        texts = [str(info.value), "\n".join(info.value._render_traceback_()), *outputs,
                 result.stdout(0), result.stdout(1), caplog.text]
        texts += [" ".join(p.cmdline()) for p in worker_processes()]
        for key in keys:
            assert not any(key in text for text in texts)
    finally:
        cluster.stop()


def test_start_failure_message_has_no_key(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(ClusterStartError) as info:
        Cluster(workers=1, python=str(broken), network="host").start()
    message = str(info.value)
    assert "exited during start-up (exit code 3)" in message and "cannot start" in message
    assert '"key"' not in message and "signature_scheme" not in message
