"""Helpers shared by the benchmark scripts: timing, the seed workload, the hand launch, results files."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SEED_CODE = (ROOT / "tests" / "data" / "seed_train.py").read_text()
SEED_LINE = "worker={i} replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281"


def printed_value(text: str, name: str) -> float:
    """The number a cell printed after ``name`` (``steps_per_s 123.4``)."""
    match = re.search(rf"{name} ([0-9.e+-]+)", text)
    if not match:
        raise RuntimeError(f"no {name} in {text[-1000:]!r}")
    return float(match.group(1))


def machine() -> dict[str, Any]:
    import psutil

    return {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform()}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def write_result(name: str, payload: dict[str, Any]) -> pathlib.Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"machine": machine(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def write_seed_scripts(directory: pathlib.Path, ports: list[int]) -> None:
    """The seed's worker-0.sh / worker-1.sh / multiworker_train.py, exactly as the tutorial writes them."""
    (directory / "multiworker_train.py").write_text(SEED_CODE)
    workers = ",".join(f'"127.0.0.1:{p}"' for p in ports)
    for i in range(len(ports)):
        tf_config = f'{{"cluster":{{"worker":[{workers}]}},"task":{{"type":"worker","index":{i}}}}}'
        (directory / f"worker-{i}.sh").write_text(f"TF_CONFIG='{tf_config}' exec python3 multiworker_train.py\n")


def hand_launch_seed() -> tuple[float, list[str], list[int]]:
    """Run the seed's steps 8-10 (worker 0 in the background, worker 1 in the foreground, wait).

    Returns (wall seconds, the two result lines, peak RSS in KiB of each worker process).
    """
    from mwnotebook.config.tf_config import PortReservation

    reservation = PortReservation.reserve(2)
    ports = reservation.ports
    reservation.release()
    with tempfile.TemporaryDirectory() as tmp:
        directory = pathlib.Path(tmp)
        write_seed_scripts(directory, ports)
        script = ("bash worker-0.sh > worker-0.log 2>&1 &\nbash worker-1.sh > worker-1.log 2>&1\nwait\n")
        wrapper = directory / "peak.py"
        # Peak RSS of each worker: GNU time is not always installed; read getrusage of children instead.
        wrapper.write_text(
            "import resource, subprocess, sys, time\n"
            "w0 = subprocess.Popen(['bash', 'worker-0.sh'], stdout=open('worker-0.log','w'), stderr=subprocess.STDOUT)\n"
            "w1 = subprocess.Popen(['bash', 'worker-1.sh'], stdout=open('worker-1.log','w'), stderr=subprocess.STDOUT)\n"
            "peaks = []\n"
            "for p in (w0, w1):\n"
            "    _, status, usage = __import__('os').wait4(p.pid, 0)\n"
            "    peaks.append(usage.ru_maxrss)\n"
            "print(*peaks)\n")
        started = time.perf_counter()
        subprocess.run(["bash", "-c", script], cwd=directory, check=True)
        elapsed = time.perf_counter() - started
        lines = [(directory / f"worker-{i}.log").read_text().strip().splitlines()[-1] for i in range(2)]
        peaks_out = subprocess.run([sys.executable, str(wrapper)], cwd=directory, check=True,
                                   capture_output=True, text=True).stdout.split()
    return elapsed, lines, [int(p) for p in peaks_out]
