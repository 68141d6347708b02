"""Idle culling and a training cell, as docs/guide/teaching.md says to set it up.

* jupyterhub-idle-culler (a hub service) reads the hub's last activity, which a cell that trains
  without printing, its notebook tab closed, moves through mwnotebook's server extension
  (mwnotebook/server/activity.py; tests/hub/test_hub_stop.py measures it): the culler keeps such
  a server to the training's end, then ends it, and nothing of the student is left.
* Culling inside the single-user server instead (Jupyter Server's kernel culler, which never
  culls a busy kernel) keeps a quiet training cell's kernel and workers for as long as the cell
  runs, and culls the kernel once the cell has ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timezone

import psutil
import pytest

from testbed.hub import INSIDE_CULLING, Hub, Student, processes_of, quiet_training, record
from testbed.processes import end_processes, is_worker

pytestmark = [pytest.mark.hub, pytest.mark.tf, pytest.mark.timeout(600)]

#: jupyterhub-idle-culler's --timeout here (s); a class would use an hour or more.
CULLER_TIMEOUT = 20
#: How long the first test's cell trains printing nothing (s): past the culler's timeout and its
#: look every 5 s (without mwnotebook's activity the culler ended such a server 21-28 s after the
#: tab closed: docs/guide/teaching.md).
TRAINING_SECONDS = 35
#: How long the quiet cell trains (s): several times the inside culler's 5 s idle timeout.
QUIET_SECONDS = 20


def wait_no_process(uid: int, bound: float = 60.0) -> list[psutil.Process]:
    """Wait (a hang bound) until ``uid`` runs nothing; what is left at the end."""
    deadline = time.monotonic() + bound
    left = processes_of(uid)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_of(uid)
    return left


def test_the_hubs_idle_culler_keeps_a_server_whose_cell_trains_quietly_and_ends_it_after(
        hub: Hub, students: list[Student]) -> None:
    """The tab closed, the cell trains printing nothing for TRAINING_SECONDS, longer than the culler's
    timeout: mwnotebook's server extension reports the training as activity, so the culler leaves
    the server to the training's end (the workers write the time they ended: a run cut short writes
    nothing), then ends it once it has been idle for its timeout, and nothing of the student is left."""
    student = students[0]
    hub.start_server(student)
    hub.forget_training(student)
    kernel = hub.kernel(student)
    culler = None
    try:
        assert kernel.execute("%load_ext mwnotebook", timeout=120).status == "ok"
        started = kernel.execute(quiet_training(TRAINING_SECONDS), timeout=300, until="training")
        assert started.status == "running", started.text[-3000:]
        kernel.ws.close()  # the student closed the tab; the cell trains on, printing nothing
        closed = datetime.now(timezone.utc)
        with open(hub.root / "idle-culler.log", "wb") as log:
            culler = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub_idle_culler", f"--url={hub.url}/hub/api",
                 f"--timeout={CULLER_TIMEOUT}", "--cull-every=5"],
                env={**os.environ, "JUPYTERHUB_API_TOKEN": hub.culler_token}, stdout=log, stderr=subprocess.STDOUT)
        ended, summary = None, ""
        deadline = time.monotonic() + TRAINING_SECONDS + 240  # a hang bound: the training, then the culler
        while hub.ready(student.name):
            ended = hub.cell_ended(student, closed) or ended
            summary = hub.cluster_summary(student) if ended is None else summary  # the last before the cull
            assert time.monotonic() < deadline, f"the idle culler never ended the server:\n{summary}"
            time.sleep(0.5)
        culled = datetime.now(timezone.utc)
        hub.wait_stopped(student.name, timeout=120)
        left = wait_no_process(student.uid)
        assert not left, [(p.pid, p.cmdline()) for p in left]
        trained = hub.trained_at(student)
        assert trained is not None, (
            f"the server was culled before the quiet cell's training ended (cell ended: {ended}):\n{summary}")
        assert ended is not None and ended <= culled
        record("idle_culler", {"timeout_s": CULLER_TIMEOUT, "cull_every_s": 5, "training_s": TRAINING_SECONDS,
                               "server_kept_after_tab_closed_s": round((culled - closed).total_seconds(), 1),
                               "culled_after_cell_end_s": round((culled - ended).total_seconds(), 1)})
    finally:
        if culler is not None:
            end_processes([psutil.Process(culler.pid)], grace=5)
            culler.wait(10)
        kernel.ws.close()


def test_culling_inside_the_server_keeps_a_training_kernel_and_culls_it_once_idle(
        hub: Hub, self_culling_student: Student) -> None:
    """The server runs with testbed/hub.py ``INSIDE_CULLING`` (idle kernels after 5 s, also with
    a client connected): the quiet cell's kernel is busy for 20 s, four times the idle timeout, and is
    kept with its workers to the cell's end; then, idle, it is culled and its workers end with it."""
    assert "--MappingKernelManager.cull_busy=False" in INSIDE_CULLING
    student = self_culling_student
    hub.start_server(student)
    kernel = hub.kernel(student)
    try:
        assert kernel.execute("%load_ext mwnotebook", timeout=120).status == "ok"
        started = kernel.execute(quiet_training(QUIET_SECONDS, "--workers 2 --timeout 120"), timeout=300,
                                 until="training")
        assert started.status == "running", started.text[-3000:]
        since = time.monotonic()
        workers = {p.pid for p in processes_of(student.uid) if is_worker(p)}
        assert len(workers) == 2
        done = kernel.collect(started.msg_id, timeout=QUIET_SECONDS + 180)  # a hang bound
        busy_for = time.monotonic() - since
        assert done.status == "ok", done.text[-3000:]
        assert workers <= {p.pid for p in processes_of(student.uid)}, "workers lost during the cell"
        path = f"/user/{student.name}/api/kernels/{kernel.id}"
        idle_since = time.monotonic()
        deadline = idle_since + 60  # a hang bound: the culler looks every 2 s for 5 s idle
        while hub.request("GET", path, token=student.token)[0] == 200:
            assert time.monotonic() < deadline, "the inside culler never culled the idle kernel"
            time.sleep(0.5)
        culled_after_idle = time.monotonic() - idle_since
        deadline = time.monotonic() + 30  # a hang bound: the workers die with their kernel
        while {p.pid for p in processes_of(student.uid)} & workers:
            assert time.monotonic() < deadline, "the culled kernel's workers are still running"
            time.sleep(0.2)
        record("inside_culling", {"kernel_busy_and_kept_s": round(busy_for, 1),
                                  "culled_after_idle_s": round(culled_after_idle, 1)})
    finally:
        kernel.ws.close()
        hub.stop_server(student.name)
