"""The slow-worker verdict from fake step timings (mwnotebook/shared/step_times.py), the worker's
step clock with a fake clock (mwnotebook/worker/_step_clock.py), and the status table's columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mwnotebook.frontend.chart.status import StatusBoard
from mwnotebook.shared.events import WorkerMetrics
from mwnotebook.shared.step_times import INPUT_KEY, OWN_KEY, WAIT_KEY, WARMUP_STEPS, from_records, slow_worker_line
from mwnotebook.worker._step_clock import StepClock


def _records(worker: int, own: float, wait: float, steps: int = 30, inp: float | None = None) -> list[dict[str, Any]]:
    out = []
    for step in range(steps):
        record: dict[str, Any] = {"worker": worker, "step": step, "kind": "batch", OWN_KEY: own, WAIT_KEY: wait}
        if inp is not None:
            record[INPUT_KEY] = inp
        out.append(record)
    return out


def test_an_input_bound_worker_is_named_with_its_figures() -> None:
    records = _records(0, 0.012, 0.080, inp=0.001) + _records(1, 0.090, 0.002, inp=0.075) + _records(
        2, 0.014, 0.078, inp=0.001)
    line = slow_worker_line(records)
    assert line is not None
    assert "worker 1 is the slow worker, input-bound" in line
    assert "90 ms per step before the collective (75 ms of it waiting for input)" in line
    assert "the others 13 ms" in line and "wait 79 ms" in line


def test_compute_bound_and_unmeasured_input() -> None:
    compute = _records(0, 0.010, 0.050, inp=0.001) + _records(1, 0.060, 0.001, inp=0.002)
    assert "worker 1 is the slow worker, compute-bound" in (slow_worker_line(compute) or "")
    unknown = _records(0, 0.060, 0.001) + _records(1, 0.010, 0.050)
    assert "worker 0 is the slow worker, slower before the collective" in (slow_worker_line(unknown) or "")
    assert "coordinator is" in (slow_worker_line(unknown, {0: "coordinator"}) or "")


def test_even_workers_and_small_differences_get_no_line() -> None:
    assert slow_worker_line(_records(0, 0.020, 0.005) + _records(1, 0.026, 0.001)) is None  # 1.3x
    assert slow_worker_line(_records(0, 0.002, 0.004) + _records(1, 0.006, 0.0)) is None  # 3x but 4 ms
    assert slow_worker_line(_records(0, 0.010, 0.050)) is None  # one worker
    assert slow_worker_line([]) is None


def test_warm_up_and_too_few_steps_are_left_out() -> None:
    # slow only in the warm-up steps: no verdict
    slow_start = _records(1, 0.5, 0.0, steps=WARMUP_STEPS) + _records(1, 0.010, 0.001)
    assert slow_worker_line(_records(0, 0.010, 0.001, steps=WARMUP_STEPS + 30) + slow_start) is None
    few = _records(0, 0.010, 0.050, steps=WARMUP_STEPS + 2) + _records(1, 0.090, 0.0, steps=WARMUP_STEPS + 2)
    assert slow_worker_line(few) is None
    # the median: one long step (a collection) does not make a worker slow
    spike = _records(1, 0.010, 0.001)
    spike[-1][OWN_KEY] = 2.0
    assert slow_worker_line(_records(0, 0.010, 0.001) + spike) is None


def test_epoch_records_and_records_without_a_split_are_ignored() -> None:
    times = from_records([{"worker": 0, "kind": "epoch", OWN_KEY: 1.0, WAIT_KEY: 0.0},
                          {"worker": 0, "step": 1, "loss": 0.3}, {"worker": 0, OWN_KEY: "x", WAIT_KEY: 0.1}])
    assert times.workers() == {}


def test_the_step_clock_splits_a_step() -> None:
    now = [0.0]
    clock = StepClock(lambda: now[0])
    clock.begin_step()
    now[0] = 0.25
    clock.input_ready()
    now[0] = 0.5
    clock.at_collective()
    now[0] = 1.5
    assert clock.end_step() == {OWN_KEY: 0.5, WAIT_KEY: 1.0, INPUT_KEY: 0.25}
    clock.begin_step()  # not stamped inside (Keras 3, stamps off): no figures
    assert clock.end_step() == {}
    clock.begin_step()  # two arrivals in one call (steps_per_execution > 1): no figures
    clock.at_collective()
    clock.at_collective()
    assert clock.end_step() == {}


def test_the_status_table_shows_the_split() -> None:
    board = StatusBoard(2, "loss")
    board.on_metrics(WorkerMetrics(0, tuple(_records(0, 0.012, 0.080))))
    board.on_metrics(WorkerMetrics(1, tuple(_records(1, 0.090, 0.002))))
    assert "ms before collective" in board.html()
    assert "worker 1: " in board.text() and "90.0 ms before the collective, 2.0 ms in it" in board.text()
    assert "ms before" not in StatusBoard(2, "loss").html()


def test_the_usage_table_of_mwcluster_status() -> None:
    from mwnotebook.engine.usage import WorkerUsage
    from mwnotebook.frontend.notebook.usage_view import usage_bundle

    mib = 1024 * 1024
    bundle = usage_bundle([WorkerUsage(0, "mwhost0", 41, 97.4, 512 * mib, memory_limit=4096 * mib),
                           WorkerUsage(1, "node2", 7, 3.0, 950 * mib, memory_limit=1000 * mib),
                           WorkerUsage(2, "node3", None, None, None, "not started")])
    lines = bundle["text/plain"].splitlines()
    assert lines[0] == "CPU and memory, read on each worker's host"
    assert lines[2].split() == ["0", "mwhost0", "41", "97", "512", "4096"]
    assert lines[3].split() == ["1", "node2", "7", "3", "950", "1000", "NEAR", "ITS", "MEMORY", "LIMIT", "(95%)"]
    assert lines[4].split() == ["2", "node3", "-", "-", "-", "-", "not", "started"]
    assert "<td style='text-align:left'>512</td>" in bundle["text/html"]


def test_the_memory_limit_is_the_smallest_of_memtotal_and_the_cgroups(tmp_path: Path) -> None:
    from mwnotebook.processes.shipped.proc_usage import memory_limit

    (tmp_path / "proc/7").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text("MemTotal:       24683784 kB\nMemFree: 1 kB\n")
    (tmp_path / "proc/7/cgroup").write_text("4:memory:/job_1/step_0\n0::/user.slice/u\n1:cpu:/\n")
    assert memory_limit(7, str(tmp_path)) == 24683784 * 1024  # no limit files: the machine's memory
    v1 = tmp_path / "sys/fs/cgroup/memory/job_1"
    (v1 / "step_0").mkdir(parents=True)
    (v1 / "step_0/memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (v1 / "memory.limit_in_bytes").write_text(f"{2 * 2**30}\n")  # the job's --mem=2G, on the parent
    assert memory_limit(7, str(tmp_path)) == 2 * 2**30
    v2 = tmp_path / "sys/fs/cgroup/user.slice/u"
    v2.mkdir(parents=True)
    (v2 / "memory.max").write_text(f"{2**30}\n")
    (tmp_path / "sys/fs/cgroup/user.slice/memory.max").write_text("max\n")
    assert memory_limit(7, str(tmp_path)) == 2**30
    assert memory_limit(8, str(tmp_path)) == 24683784 * 1024  # no such process: the machine's memory


def test_the_status_table_shows_cpu_and_memory_from_the_workers_hosts() -> None:
    from mwnotebook.shared.events import WorkerResources

    board = StatusBoard(2, "loss")
    board.on_resources(WorkerResources(0, 97.0, 512 * 2**20, 4096 * 2**20))
    board.on_resources(WorkerResources(1, 3.0, 950 * 2**20, 1000 * 2**20, near_limit=True))
    html = board.html()
    assert "<th style='padding:2px 10px;text-align:left'>memory MiB</th>" in html
    assert "<td style='padding:2px 10px'>950 (near its limit)</td>" in html
    assert board.text().splitlines()[1].endswith("950 MiB (near its memory limit)")
