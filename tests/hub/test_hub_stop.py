"""A student's server stopped by the hub (the admin API, as a teacher's stop button or the idle culler
does) while their cell trains on two workers: no process of that student is left within seconds
(measured: artifacts/hub.json), and the other student is not disturbed. And what the hub sees as the
student's last activity while a cell trains without printing, then printing (measured, for the
culler's setting in docs/guide/teaching.md)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from testbed.hub import ACTIVITY_INTERVAL, Hub, Student, Watch, processes_of, record
from testbed.processes import is_worker
from testbed.seed_cell import LONG_RUN

pytestmark = [pytest.mark.hub, pytest.mark.tf, pytest.mark.timeout(900)]

#: A hang bound for the stop, not a timing: the measured figure goes to artifacts/hub.json.
STOP_BOUND = 60.0

#: Trains (an all-reduce every 10 ms) quietly for ``QUIET_SECONDS`` after printing "training", then
#: prints a line every 2 s for ``TICKS`` lines, then "trained".
QUIET_SECONDS = 25
TICKS = 8
QUIET_THEN_TICKS = f"""%%mwtrain --workers 2
import time
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()

@tf.function
def step():
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)

def train(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        step()
        time.sleep(0.01)

step()
print("training", flush=True)
train({QUIET_SECONDS})
for tick in range({TICKS}):
    print("tick", tick, flush=True)
    train(2)
print("trained", flush=True)
"""


def test_a_server_stopped_mid_training_leaves_no_process_and_the_other_student_goes_on(
        hub: Hub, students: list[Student]) -> None:
    student, bystander = students
    for someone in students:
        hub.start_server(someone)
    other = hub.kernel(bystander)
    kernel = hub.kernel(student)
    try:
        assert other.execute("print(6 * 7)", timeout=120).status == "ok"
        bystander_before = {p.pid for p in processes_of(bystander.uid)}
        assert kernel.execute("%load_ext mwnotebook", timeout=120).status == "ok"
        started = kernel.execute(f"%%mwtrain --workers 2\n{LONG_RUN}", timeout=300, until="training")
        assert started.status == "running", started.text[-3000:]
        assert len([p for p in processes_of(student.uid) if is_worker(p)]) == 2

        asked = time.monotonic()
        hub.stop_server(student.name)
        left = processes_of(student.uid)
        while left and time.monotonic() - asked < STOP_BOUND:
            time.sleep(0.1)
            left = processes_of(student.uid)
        seconds = time.monotonic() - asked
        assert not left, [(p.pid, p.cmdline()) for p in left]
        record("stop_to_no_process_s", round(seconds, 2))
        hub.wait_stopped(student.name)

        assert hub.ready(bystander.name)
        answer = other.execute("print(6 * 7)", timeout=120)
        assert answer.status == "ok" and "42" in answer.lines, answer.text
        assert bystander_before <= {p.pid for p in processes_of(bystander.uid)}
    finally:
        other.close()
        kernel.ws.close()


def test_what_the_hub_sees_as_activity_while_a_cell_trains_with_no_tab_open(hub: Hub, students: list[Student]) -> None:
    """The hub's ``last_activity`` for the student's server (what jupyterhub-idle-culler reads),
    sampled every second after the student closed the notebook's tab (its websocket) while the cell
    trains: while the cell prints nothing it stays where the tab left it; once it prints, it moves on
    (the single-user server reports its kernels' output). With a tab open, the websocket's pings
    through the proxy (every 30 s) move it too. Samples in artifacts/hub.json ``activity``."""
    student = students[0]
    hub.start_server(student)
    kernel = hub.kernel(student)
    try:
        assert kernel.execute("%load_ext mwnotebook", timeout=120).status == "ok"
        started = kernel.execute(QUIET_THEN_TICKS, timeout=300, until="training")
        assert started.status == "running", started.text[-3000:]
        kernel.ws.close()  # the tab closed: nothing goes through the proxy to this server from now on
        closed = datetime.now(timezone.utc)
        watch = Watch(lambda: hub.last_activity(student.name), interval=1.0)
        time.sleep(QUIET_SECONDS - 2)
        quiet = [value for _, value in watch.samples if not isinstance(value, Exception)]
        time.sleep(2 + 2 * TICKS + 3 * ACTIVITY_INTERVAL)  # the ticks, and their report reaching the hub
        samples = [(t, value) for t, value in watch.stop() if not isinstance(value, Exception)]
    finally:
        kernel.close()
    server_quiet = max(s for _, s in quiet if s is not None)
    server_end = max(s for _, (_, s) in samples if s is not None)
    record("activity", {
        "quiet_s": QUIET_SECONDS, "tab_closed": closed.isoformat(),
        "server_last_activity_in_quiet_part": server_quiet.isoformat(),
        "quiet_part_moved_it_s": round((server_quiet - closed).total_seconds(), 1),
        "server_last_activity_at_end": server_end.isoformat(),
        "ticks_moved_it_s": round((server_end - closed).total_seconds(), 1),
        "samples": [(round(t, 1), u.isoformat() if u else None, s.isoformat() if s else None)
                    for t, (u, s) in samples[::3]],
    })
    # A quiet training cell is not activity to the hub: its last activity stays near the tab's close
    # (a bound for the close's way through the proxy and the hub's poll, not a timing) ...
    assert server_quiet < closed + timedelta(seconds=ACTIVITY_INTERVAL), (server_quiet, closed)
    # ... and its output is: the ticks, which start QUIET_SECONDS after "training", moved it on.
    assert server_end > closed + timedelta(seconds=QUIET_SECONDS - ACTIVITY_INTERVAL), (server_end, closed)
