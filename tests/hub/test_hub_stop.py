"""A student's server stopped by the hub (the admin API, as a teacher's stop button or the idle culler
does) while their cell trains on two workers: no process of that student is left within seconds
(measured: artifacts/hub.json), and the other student is not disturbed. And what the hub sees as the
student's last activity while a cell trains without printing, its tab closed, and after it ended
(measured, for the culler's setting in docs/guide/teaching.md)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from testbed.hub import ACTIVITY_INTERVAL, Hub, Student, Watch, processes_of, quiet_training, record
from testbed.processes import is_worker
from testbed.seed_cell import LONG_RUN

pytestmark = [pytest.mark.hub, pytest.mark.tf, pytest.mark.timeout(900)]

#: A hang bound for the stop, not a timing: the measured figure goes to artifacts/hub.json.
STOP_BOUND = 60.0

#: How long the activity test's cell trains without printing (s): several of the hub's activity intervals.
QUIET_SECONDS = 25


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


def test_the_hub_sees_a_quiet_training_cell_as_activity_with_no_tab_open(hub: Hub, students: list[Student]) -> None:
    """The hub's ``last_activity`` for the student's server (what jupyterhub-idle-culler reads),
    sampled every second after the student closed the notebook's tab (its websocket) while the cell
    trains printing nothing: mwnotebook's server extension marks the server active while the cluster
    runs the cell (mwnotebook/server/activity.py, every ACTIVITY_INTERVAL s here, as the hub's
    reports), so the hub's figure follows the training; once the cell has ended it stays there.
    Samples in artifacts/hub.json ``activity``."""
    student = students[0]
    hub.start_server(student)
    hub.forget_training(student)
    kernel = hub.kernel(student)
    try:
        assert kernel.execute("%load_ext mwnotebook", timeout=120).status == "ok"
        started = kernel.execute(quiet_training(QUIET_SECONDS), timeout=300, until="training")
        assert started.status == "running", started.text[-3000:]
        kernel.ws.close()  # the tab closed: nothing goes through the proxy to this server from now on
        closed = datetime.now(timezone.utc)
        watch = Watch(lambda: (datetime.now(timezone.utc), *hub.last_activity(student.name)), interval=1.0)
        deadline = time.monotonic() + QUIET_SECONDS + 120  # a hang bound for the cell's end
        while (ended := hub.cell_ended(student, closed)) is None:
            assert time.monotonic() < deadline, f"the quiet cell never ended:\n{hub.cluster_summary(student)}"
            time.sleep(0.5)
        time.sleep(3 * ACTIVITY_INTERVAL)  # after the cell: the hub's figure must stay put
        samples = [value for _, value in watch.stop() if not isinstance(value, Exception)]
    finally:
        kernel.close()
    trained = hub.trained_at(student)
    assert trained is not None, "the quiet cell did not train to its end"
    during = [(now, server) for now, _, server in samples if server is not None and now <= trained]
    after = [server for now, _, server in samples if server is not None and now > ended]
    lag = [(now - server).total_seconds() for now, server in during if now > closed + timedelta(seconds=2)]
    final = max(after)
    record("activity", {
        "quiet_s": QUIET_SECONDS, "activity_interval_s": ACTIVITY_INTERVAL, "tab_closed": closed.isoformat(),
        "training_ended": trained.isoformat(), "cell_ended": ended.isoformat(),
        "hub_behind_while_training_max_s": round(max(lag), 1),
        "hub_behind_while_training_mean_s": round(sum(lag) / len(lag), 1),
        "final_after_cell_end_s": round((final - ended).total_seconds(), 1),
        "samples": [(now.isoformat(), user.isoformat() if user else None, server.isoformat() if server else None)
                    for now, user, server in samples[::3]],
    })
    # The quiet cell is activity: the hub's figure moved on with the training, never further behind than
    # the mark's and the report's intervals (a bound, not a timing) ...
    assert max(server for _, server in during) > closed + timedelta(seconds=QUIET_SECONDS - 3 * ACTIVITY_INTERVAL), (
        during[-3:], closed)
    assert max(lag) < 3 * ACTIVITY_INTERVAL + 5, lag
    # ... and once the cell has ended (the cluster idle), nothing moves it: the culler may end the
    # server from there (a bound for the hub's report, not a timing).
    assert final < ended + timedelta(seconds=ACTIVITY_INTERVAL), (final, ended)
