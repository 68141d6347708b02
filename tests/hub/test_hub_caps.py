"""The teacher's class cap on a hub: ``MWNOTEBOOK_MAX_WORKERS=2``, set for every student by
``c.Spawner.environment`` (testbed/hub.py), counts a student's TensorFlow tasks across all
their notebooks: with two workers running in one notebook, a cell of another notebook that asks
for one more is refused before anything starts, with an error that names the cap
(docs/guide/caps.md)."""

from __future__ import annotations

import pytest

from testbed.hub import CLASS_CAP, Hub, Student, processes_of

pytestmark = [pytest.mark.hub, pytest.mark.integration, pytest.mark.timeout(600)]


def test_the_class_cap_refuses_a_cell_past_it_and_starts_nothing(hub: Hub, students: list[Student]) -> None:
    student = students[1]
    hub.start_server(student)
    first, second = hub.kernel(student), hub.kernel(student)
    try:
        for kernel in (first, second):
            assert kernel.execute("%load_ext mwnotebook", timeout=120).status == "ok"
        running = first.execute(f"%%mwtrain --workers {CLASS_CAP}\nprint('within the cap')", timeout=300)
        assert running.status == "ok" and "[worker 1] within the cap" in running.lines, running.text[-3000:]

        before = {p.pid for p in processes_of(student.uid)}
        refused = second.execute("%%mwtrain --workers 1\nprint('started')", timeout=120)
        after = {p.pid for p in processes_of(student.uid)}
        assert refused.status == "error", refused.text[-3000:]
        said = refused.text + refused.evalue
        assert "MWNOTEBOOK_MAX_WORKERS" in said and str(CLASS_CAP) in said, said[-3000:]
        assert "[worker 0] started" not in refused.lines
        assert after <= before, f"processes started by a refused cell: {sorted(after - before)}"
        status, body = hub.clusters(student)
        assert status == 200 and len(body["clusters"]) == 1, body
    finally:
        first.close()
        second.close()
