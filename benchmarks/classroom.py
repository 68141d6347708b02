"""A class on one machine: K students each run the seed cell on two workers at the same moment.

    python -m benchmarks.classroom                               # K = 2, 4, 8; each without, then with caps
    python -m benchmarks.classroom --students 8 --caps with      # one K, one setting
    python -m benchmarks.classroom --students 2 4 --caps without

Each student is a notebook kernel (jupyter_client, the ipykernel a notebook runs) that has loaded the
extension and whose worker template is ready. For each K, first without caps, then with the CPU
cap a hub sets (``CPU_LIMIT`` = the machine's cores / K in each kernel's environment, as JupyterHub's
spawner exports it from ``c.Spawner.cpu_limit``; ``MWNOTEBOOK_MAX_WORKERS`` is left out: it counts
per Unix user, and the K kernels here are one user): one student alone runs
``%%mwtrain --workers 2`` + the seed cell (cold: fresh workers) and again (warm: the same workers),
then all K at once (cold), then all K again on the same workers (warm). Reports each student's
seconds (request to idle), the slowest student's time over the one alone (cold over cold, warm over
warm), the threads TensorFlow gave each worker, and
memory per student: the PSS of the student's kernel and everything it started (template, workers),
after the cell. Every student's cell must print both workers' exact seed lines (a missing one is an
error, not a figure). The K kernels start (and their templates get ready) in parallel, before any
timing. Writes benchmarks/results/classroom/<commit>.json, with the rows done so far when one fails
(and what failed). Not a test.
"""

from __future__ import annotations

import argparse
import os
import threading
from typing import Any

import psutil

from benchmarks._suite import SEED_CODE, SEED_LINE, Run, cell, start_kernel, stop_kernel, timed
from benchmarks.seed import TEMPLATE_READY

SEED_CELL = "%%mwtrain --workers 2\n" + SEED_CODE
#: What each worker's TensorFlow and OpenMP use (read after the seed, in the workers; 0: TensorFlow's default, every core).
THREADS_CELL = """%%mwtrain --workers 2
import os
import tensorflow as tf
print("threads intra", tf.config.threading.get_intra_op_parallelism_threads(),
      "inter", tf.config.threading.get_inter_op_parallelism_threads(), "OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS"))
"""


class Student:
    """One notebook kernel with the extension loaded and its worker template ready."""

    def __init__(self, env: dict[str, str]) -> None:
        self.km, self.kc = start_kernel(env)
        timed(self.kc, "%load_ext mwnotebook")
        timed(self.kc, TEMPLATE_READY, timeout=600)

    def seed(self) -> float:
        wall, out = cell(self.kc, SEED_CELL, timeout=1200)
        for i in range(2):
            if f"[worker {i}] {SEED_LINE.format(i=i)}" not in out:
                raise RuntimeError(f"worker {i}'s seed line is missing:\n{out[-3000:]}")
        return wall

    def stop_cluster(self) -> None:
        timed(self.kc, "%mwcluster stop")

    def pss_mib(self) -> float:
        """The PSS of this kernel and every process it started (template, workers, their helpers)."""
        pid = self.km.provisioner.process.pid
        root = psutil.Process(pid)
        total = 0
        for proc in [root, *root.children(recursive=True)]:
            try:
                total += proc.memory_full_info().pss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return round(total / 2**20, 1)

    def threads(self) -> str:
        _, out = cell(self.kc, THREADS_CELL)
        return " | ".join(sorted({line.split("] ", 1)[-1] for line in out.splitlines() if "threads intra" in line}))

    def close(self) -> None:
        try:
            self.stop_cluster()
        finally:
            stop_kernel(self.km, self.kc)


def at_once(students: list[Student]) -> list[float]:
    """Every student's seed cell sent at the same moment; each one's seconds."""
    results: list[Any] = [None] * len(students)

    def run(i: int) -> None:
        try:
            results[i] = students[i].seed()
        except BaseException as e:  # raised below, on the main thread
            results[i] = e
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(students))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [round(r, 2) for r in results]


def start_students(k: int, env: dict[str, str]) -> list[Student]:
    """``k`` students, started at once (setup, not timed); all ended if one fails to start."""
    started: list[Any] = [None] * k

    def start(i: int) -> None:
        try:
            started[i] = Student(env)
        except BaseException as e:  # raised below, on the main thread
            started[i] = e
    threads = [threading.Thread(target=start, args=(i,)) for i in range(k)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [s for s in started if isinstance(s, BaseException)]
    if failed:
        for student in started:
            if isinstance(student, Student):
                student.close()
        raise failed[0]
    return list(started)


def one_class(k: int, caps: bool) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    env = {"CPU_LIMIT": f"{cores / k:g}"} if caps else {}
    students = start_students(k, env)
    try:
        alone = round(students[0].seed(), 2)
        alone_warm = round(students[0].seed(), 2)
        students[0].stop_cluster()
        cold = at_once(students)
        pss = [s.pss_mib() for s in students]
        warm = at_once(students)
        threads = students[0].threads()
    finally:
        for student in students:
            student.close()
    row = {"k": k, "caps": caps, "cpu_limit": env.get("CPU_LIMIT"), "alone_s": alone, "alone_warm_s": alone_warm,
           "cold_s": cold, "warm_s": warm, "slowest_over_alone_cold": round(max(cold) / alone, 2),
           "slowest_over_alone_warm": round(max(warm) / alone_warm, 2),
           "pss_mib_per_student": pss, "worker_threads": threads}
    print(row, flush=True)
    return row


CAPS = {"both": [False, True], "without": [False], "with": [True]}


def main() -> None:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0] + "\n\n" + doc.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, nargs="+", default=[2, 4, 8], metavar="K",
                        help="class sizes to run, each in turn (default: 2 4 8)")
    parser.add_argument("--caps", choices=sorted(CAPS), default="both",
                        help="without: no cap; with: CPU_LIMIT = cores / K in each kernel; both (default): "
                             "without, then with, for each K")
    args = parser.parse_args()
    if any(k < 1 for k in args.students):
        parser.error(f"--students: each K must be 1 or more, not {args.students}")
    run = Run("classroom")
    rows: list[dict[str, Any]] = []
    failed = None
    try:
        for k in args.students:
            for caps in CAPS[args.caps]:
                rows.append(one_class(k, caps))
    except BaseException as e:
        failed = f"{type(e).__name__}: {e}"[:3000]
        raise
    finally:
        if rows or failed:
            print(f"written to {run.write({'rows': rows, **({'failed': failed} if failed else {})})}")


if __name__ == "__main__":
    main()
