"""Real clusters (plain ipykernel workers, no TensorFlow) publish their state and obey the control channel."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from mwnotebook import Cluster, ClusterRunError
from mwnotebook.registry import control, orphans, state
from testbed.processes import WORKER_MODULES, alive_workers, wait_gone
from tests._shared.waits import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "rt"))
    return tmp_path / "rt" / "mwnotebook"


def documents(directory: Path) -> list[dict[str, Any]]:
    return [doc for _, doc in state.read_all(directory)]



def test_a_running_cluster_publishes_its_workers_and_leaves_nothing_when_stopped(runtime: Path) -> None:
    cluster = Cluster(workers=2)
    try:
        cluster.start()
        doc = wait_for(lambda: [d for d in documents(runtime) if d["state"] == "idle" and d["workers"]])[0]
        pids = {w.pid for w in cluster.status()}
        assert {w["pid"] for w in doc["workers"]} == pids
        assert [w["tf_config"] for w in doc["workers"]] == cluster.tf_configs
        assert doc["engine"] == "local" and doc["owner"]["pid"] == os.getpid() and doc["spec"]["workers"] == 2
        path = state.state_path(runtime, doc["id"])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(Path(doc["control"]).stat().st_mode) == 0o600

        done = threading.Event()
        threading.Thread(target=lambda: (cluster.run("import time; time.sleep(2)"), done.set()), daemon=True).start()
        running = wait_for(lambda: [d for d in documents(runtime) if d["state"] == "running"])[0]
        assert running["cell"]["text"] == "import time; time.sleep(2)" and running["cell"]["since"] > 0
        assert done.wait(30)
        with pytest.raises(ClusterRunError):
            cluster.run("raise ValueError('no good')")
        # A worker's state change names the error (``ValueError``) and its error output then gives the
        # whole line; the two come on different channels, so the name alone may be published first.
        failed = wait_for(lambda: [d for d in documents(runtime) if d["state"] == "idle" and "no good" in d["last_error"]
                                   and all("no good" in w["last_error"] for w in d["workers"])])[0]
        assert [w["last_error"] for w in failed["workers"]] == ["ValueError: no good"] * 2
    finally:
        cluster.stop()
    assert os.listdir(runtime) == []


def test_a_stop_through_the_channel_ends_a_running_cell_and_the_next_cell_starts_fresh(runtime: Path) -> None:
    cluster = Cluster(workers=2)
    try:
        cluster.start()
        first = {w.pid for w in cluster.status()}
        errors: list[BaseException] = []

        def long_cell() -> None:
            try:
                cluster.run("import time; time.sleep(60)")
            except BaseException as e:
                errors.append(e)
        cell = threading.Thread(target=long_cell, daemon=True)
        cell.start()
        doc = wait_for(lambda: [d for d in documents(runtime) if d["state"] == "running"])[0]
        control.send(doc["control"], "stop")
        cell.join(60)
        assert not cell.is_alive() and errors and isinstance(errors[0], ClusterRunError)
        wait_for(lambda: not cluster.started and os.listdir(runtime) == [])
        assert wait_gone(first, 10, WORKER_MODULES)[0] == set()
        assert cluster.run("print('fresh')").stdout(0) == "fresh\n"
        assert not {w.pid for w in cluster.status()} & first
        assert len(documents(runtime)) == 1
    finally:
        cluster.stop()


def test_a_restart_and_an_interrupt_through_the_channel(runtime: Path) -> None:
    cluster = Cluster(workers=2)
    try:
        cluster.start()
        doc = wait_for(lambda: [d for d in documents(runtime) if d["workers"]])[0]
        first = {w["pid"] for w in doc["workers"]}
        control.send(doc["control"], "restart")
        fresh = wait_for(lambda: [d for d in documents(runtime)
                                  if d["workers"] and d["state"] == "idle" and not {w["pid"] for w in d["workers"]} & first])
        assert {w["pid"] for w in fresh[0]["workers"]} == {w.pid for w in cluster.status()}
        assert alive_workers(first) == set() or wait_gone(first, 10, WORKER_MODULES)[0] == set()
        errors: list[BaseException] = []
        cell = threading.Thread(target=lambda: errors.append(pytest.raises(ClusterRunError, cluster.run,
                                                                           "import time; time.sleep(60)").value))
        cell.start()
        wait_for(lambda: [d for d in documents(runtime) if d["state"] == "running"])
        control.send(doc["control"], "interrupt")
        cell.join(60)
        assert not cell.is_alive() and errors
        assert cluster.run("print(2)").stdout(1) == "2\n"  # the same workers go on
    finally:
        cluster.stop()


OWNER = textwrap.dedent("""
    import sys, time
    from mwnotebook import Cluster
    c = Cluster(workers=2)
    c.start()
    print(" ".join(str(w.pid) for w in c.status()), flush=True)
    time.sleep(600)
""")


def test_a_killed_owners_cluster_is_orphaned_then_gone_with_no_process_left(runtime: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime.parent)})
    try:
        assert owner.stdout is not None
        pids = {int(p) for p in owner.stdout.readline().split()}
        path, doc = wait_for(lambda: [(p, d) for p, d in state.read_all(runtime) if d["workers"]])[0]
        assert {w["pid"] for w in doc["workers"]} == pids
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        shown = orphans.sweep_one(path, doc)
        assert shown is not None and shown["state"] == "orphaned"
        assert wait_for(lambda: not [p for p in pids if psutil.pid_exists(p) and
                                     psutil.Process(p).status() != psutil.STATUS_ZOMBIE], 10)
        wait_for(lambda: orphans.sweep_one(path, state.read_state(path) or doc) is None, 10)
        assert os.listdir(runtime) == []
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()


def test_an_owner_that_exits_without_stopping_leaves_no_file(runtime: Path) -> None:
    code = OWNER.replace("time.sleep(600)", "sys.exit(0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime.parent)})
    assert done.returncode == 0, done.stderr
    pids = {int(p) for p in done.stdout.split()}
    assert len(pids) == 2 and wait_gone(pids, 10, WORKER_MODULES)[0] == set()
    assert os.listdir(runtime) == []
