"""Two students on one JupyterHub, as a class meets it: both press Run on the seed cell at the same
moment (through the hub's proxy, the Jupyter server's REST API and the kernel's websocket); each
sees both workers' exact lines, each student's clusters API lists only their own cluster with its
workers running as that student, and one student's token cannot read the other's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.hub import CellResult, Hub, HubKernel, Student, processes_of, uid_of
from testbed.seed_cell import SEED_CELL, expected_line

pytestmark = [pytest.mark.hub, pytest.mark.tf, pytest.mark.timeout(900)]

#: A hang bound for the seed cell of two students at once on a loaded two-core machine, not a timing.
SEED_BOUND = 420.0


@pytest.fixture(scope="module")
def seeded(hub: Hub, students: list[Student]) -> Iterator[tuple[list[HubKernel], list[CellResult]]]:
    """Both students' servers and a notebook kernel each; both seed cells sent at once."""
    threads = [threading.Thread(target=hub.start_server, args=(s,)) for s in students]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kernels = [hub.kernel(s) for s in students]
    try:
        for kernel in kernels:
            loaded = kernel.execute("%load_ext mwnotebook", timeout=120)
            assert loaded.status == "ok", loaded.text
        results: list[Any] = [None] * len(kernels)

        def run(i: int) -> None:
            try:
                results[i] = kernels[i].execute(f"%%mwtrain --workers 2\n{SEED_CELL}", timeout=SEED_BOUND)
            except BaseException as e:  # reported by the test, not lost on the thread
                results[i] = e
        runs = [threading.Thread(target=run, args=(i,)) for i in range(len(kernels))]
        for thread in runs:
            thread.start()
        for thread in runs:
            thread.join()
        yield kernels, results
    finally:
        for kernel in kernels:
            kernel.close()


def test_two_students_seed_cells_at_once_each_print_both_workers_exact_lines(
        seeded: tuple[list[HubKernel], list[CellResult]]) -> None:
    _, results = seeded
    for result in results:
        assert isinstance(result, CellResult), repr(result)
        assert result.status == "ok", result.text[-3000:]
        for worker in range(2):
            assert f"[worker {worker}] {expected_line(worker)}" in result.lines, result.text[-3000:]


def test_each_student_sees_only_their_own_cluster_whose_workers_run_as_them(
        hub: Hub, students: list[Student], seeded: tuple[list[HubKernel], list[CellResult]]) -> None:
    for student in students:
        status, body = hub.clusters(student)
        assert status == 200, body
        clusters = body["clusters"]
        assert len(clusters) == 1, clusters
        (cluster,) = clusters
        workers = [w["pid"] for w in cluster["workers"]]
        assert len(workers) == 2, cluster
        assert {uid_of(pid) for pid in workers} == {student.uid}
        assert uid_of(cluster["owner"]["pid"]) == student.uid
        mine = {p.pid for p in processes_of(student.uid)}
        assert set(workers) <= mine


def test_one_students_token_cannot_read_the_others_clusters(
        hub: Hub, students: list[Student], seeded: tuple[list[HubKernel], list[CellResult]]) -> None:
    first, second = students
    for owner, other in ((first, second), (second, first)):
        status, body = hub.clusters(owner, token=other.token)
        assert status == 403, (status, body)
        assert "clusters" not in str(body)
