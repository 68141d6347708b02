"""The benchmark suite's shared runner: one result format, the seed workload, notebook-kernel timing.

Every script of the suite (and every probe in benchmarks/probes/) is run from the repository root
as a module, ``python -m benchmarks.<name> ...``, and ends with :func:`write_result`, which writes
``benchmarks/results/<script>/<short-sha>.json``: the commit measured (and whether the package had
uncommitted changes), the date, the command line, the machine and its load (``uptime`` before and
after), and the script's figures. A rerun on the same commit appends a run to the same file; no
result is told apart by a file-name suffix. Processes the scripts start (notebook kernels, worker
templates) get ``PYTHONPATH`` pointing at this checkout, so a ``git worktree`` of another commit
measures that commit's code.
"""

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
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SEED_CODE = (ROOT / "tests" / "data" / "seed_train.py").read_text()
SEED_LINE = "worker={i} replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281"

# What this process starts (kernels, templates, workers) imports this checkout's package.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def git(*args: str, tree: pathlib.Path = ROOT) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=tree).stdout.strip()


def commit(tree: pathlib.Path = ROOT) -> str:
    """The short sha of ``tree``'s HEAD."""
    return git("rev-parse", "--short", "HEAD", tree=tree) or "unknown"


def uptime() -> str:
    """``uptime``'s line (its load averages are what each row of benchmarks/README.md quotes)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> dict[str, Any]:
    import psutil

    return {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform()}


def command_line() -> str:
    """This process's command as run from the repository root (``python -m benchmarks.x ...``)."""
    main = pathlib.Path(sys.argv[0]).resolve()
    try:
        module = ".".join(main.relative_to(ROOT).with_suffix("").parts)
    except ValueError:
        return " ".join(["python", *sys.argv])
    return " ".join(["python", "-m", module, *sys.argv[1:]])


class Run:
    """One run of one script: opened before the measurements (load, time), written at the end."""

    def __init__(self, script: str) -> None:
        self.script = script
        self.started = time.time()
        self.load_before = uptime()

    def write(self, results: dict[str, Any]) -> pathlib.Path:
        sha = commit()
        record = {"commit": sha, "package_dirty": bool(git("status", "--porcelain", "--", "mwnotebook")),
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
                  "command": command_line(),
                  "wall_s": round(time.time() - self.started, 1), "load_before": self.load_before,
                  "load_after": uptime(), "machine": machine(), "results": results}
        path = RESULTS / self.script / f"{sha}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        stored = json.loads(path.read_text()) if path.exists() else {"script": self.script, "commit": sha, "runs": []}
        stored["runs"].append(record)
        path.write_text(json.dumps(stored, indent=1) + "\n")
        return path


def write_result(script: str, results: dict[str, Any]) -> pathlib.Path:
    """For scripts that do not open a :class:`Run` first: the load is read at the end only."""
    return Run(script).write(results)


def latest(script: str, sha: str | None = None) -> dict[str, Any]:
    """The newest stored run of ``script`` (at ``sha``, default: this checkout's commit)."""
    stored = json.loads((RESULTS / script / f"{sha or commit()}.json").read_text())
    run: dict[str, Any] = stored["runs"][-1]
    return run


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def printed_value(text: str, name: str) -> float:
    """The number a cell printed after ``name`` (``steps_per_s 123.4``)."""
    match = re.search(rf"{name} ([0-9.e+-]+)", text)
    if not match:
        raise RuntimeError(f"no {name} in {text[-1000:]!r}")
    return float(match.group(1))


# ----------------------------------------------------------------------------- notebook kernels
def start_kernel(env: dict[str, str] | None = None) -> tuple[Any, Any]:
    """A notebook kernel (the ipykernel a notebook runs) in the repository root; (manager, client)."""
    from jupyter_client.manager import start_new_kernel

    return start_new_kernel(kernel_name="python3", env=dict(os.environ, **(env or {})), cwd=str(ROOT))


def stop_kernel(km: Any, kc: Any) -> None:
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def cell(kc: Any, code: str, timeout: float = 600) -> tuple[float, str]:
    """Execute ``code`` as one cell: (seconds from request to idle, its stream output)."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    started = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    elapsed = time.perf_counter() - started
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"{code[:60]!r} failed: {reply['content'].get('ename')}: "
                           f"{reply['content'].get('evalue')}\n{''.join(out)[-2000:]}")
    return elapsed, "".join(out)


def timed(kc: Any, code: str, timeout: float = 600) -> float:
    return cell(kc, code, timeout)[0]


def value(kc: Any, expression: str, timeout: float = 900) -> Any:
    """Evaluate ``expression`` (JSON-able) in the kernel and return it."""
    _, out = cell(kc, f"import json as _json\nprint('@@' + _json.dumps({expression}))", timeout)
    return json.loads(out[out.rindex("@@") + 2:])


def alternate(cells: dict[str, tuple[Any, str]], repeats: int, warm: int = 3) -> dict[str, float]:
    """Time each named (client, code) cell ``repeats`` times, all of them in turn each round so that
    the machine's load hits them alike; medians in ms after ``warm`` untimed rounds."""
    for _ in range(warm):
        for kc, code in cells.values():
            timed(kc, code)
    samples: dict[str, list[float]] = {name: [] for name in cells}
    for _ in range(repeats):
        for name, (kc, code) in cells.items():
            samples[name].append(timed(kc, code))
    return {name: round(1000 * statistics.median(s), 2) for name, s in samples.items()}


# ----------------------------------------------------------------------------- the seed workload
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
        script = "bash worker-0.sh > worker-0.log 2>&1 &\nbash worker-1.sh > worker-1.log 2>&1\nwait\n"
        wrapper = directory / "peak.py"
        # Peak RSS of each worker: GNU time is not always installed; read getrusage of children instead.
        wrapper.write_text(
            "import os, subprocess\n"
            "w0 = subprocess.Popen(['bash', 'worker-0.sh'], stdout=open('worker-0.log','w'), stderr=subprocess.STDOUT)\n"
            "w1 = subprocess.Popen(['bash', 'worker-1.sh'], stdout=open('worker-1.log','w'), stderr=subprocess.STDOUT)\n"
            "print(*[os.wait4(p.pid, 0)[2].ru_maxrss for p in (w0, w1)])\n")
        started = time.perf_counter()
        subprocess.run(["bash", "-c", script], cwd=directory, check=True)
        elapsed = time.perf_counter() - started
        lines = [(directory / f"worker-{i}.log").read_text().strip().splitlines()[-1] for i in range(2)]
        peaks_out = subprocess.run([sys.executable, str(wrapper)], cwd=directory, check=True,
                                   capture_output=True, text=True).stdout.split()
    return elapsed, lines, [int(p) for p in peaks_out]


def hand_launch_checked(attempts: int = 3) -> float:
    """The hand launch's seconds; retried when the seed's own scripts fail under load (worker 1
    "failed to connect" to worker 0), at most ``attempts`` times."""
    for _ in range(attempts):
        elapsed, lines, _ = hand_launch_seed()
        if lines == [SEED_LINE.format(i=i) for i in range(2)]:
            return elapsed
        print(f"hand launch failed: {lines}", file=sys.stderr, flush=True)
    raise RuntimeError(f"the hand launch of the seed failed {attempts} times in a row")


def check_seed(stdout: Callable[[int], str], n: int = 2) -> None:
    """Every worker printed the seed's line with ``replicas=n``."""
    for i in range(n):
        if not re.search(rf"worker={i} replicas={n} initial_loss=", stdout(i)):
            raise RuntimeError(f"worker {i} did not print the seed's line with replicas={n}:\n{stdout(i)[-2000:]}")
