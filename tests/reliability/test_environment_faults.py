"""Scenarios 9a and 10 of benchmarks/reliability_table.md: a worker interpreter without TensorFlow, and garbage input.

9a uses a real virtual environment made WITHOUT system site packages (so it cannot see this
machine's TensorFlow), with only ipykernel installed by pip and mwnotebook put on its path by a
``.pth`` file. It is built once and kept in ``~/.cache/mwnotebook-tests``.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from IPython.core.error import UsageError

from mwnotebook import Cluster, ClusterSpec, ClusterStartError, ConfigError, MWNotebookError, WorkerError
from testbed.notebook_kernel import ROOT
from testbed.processes import MW_MODULES, descendants, kill_all, wait_gone
from tests._plugins.reliability_table import record

from .scenario import CellThread

pytestmark = [pytest.mark.reliability, pytest.mark.tf]

CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "mwnotebook-tests"


@pytest.fixture(scope="module")
def python_without_tf() -> str:
    venv = CACHE / f"venv-no-tf-py{sys.version_info.major}{sys.version_info.minor}"
    python = venv / "bin" / "python"
    done = venv / ".mwnotebook-ready"
    if not done.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
        pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "ipykernel", "psutil"],
                             capture_output=True, text=True, timeout=400)
        if pip.returncode != 0:
            pytest.skip(f"cannot pip-install ipykernel into a fresh venv here: {pip.stderr[-500:]}")
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        pathlib.Path(site, "mwnotebook_checkout.pth").write_text(str(ROOT) + "\n")
        done.write_text("ok\n")
    probe = subprocess.run([str(python), "-c", "import mwnotebook, ipykernel\ntry:\n import tensorflow\n"
                            "except ImportError: print('no-tf')"], capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "no-tf", probe.stdout + probe.stderr
    return str(python)


def test_9a_tensorflow_missing_in_the_worker_python(python_without_tf):
    before = descendants()
    with Cluster(workers=2, cpu=True, python=python_without_tf) as cluster:
        pids = descendants() - before
        cell = CellThread(cluster, "import tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n",
                          timeout=60)
        cell.join(90)
        detected_s, failed_s = cell.since(cell.started_at)
        err = cell.error
        try:
            recovered = cluster.run("print('still usable')", timeout=30).stdout(1) == "still usable\n"
        except MWNotebookError:
            recovered = False
    left, _ = wait_gone(pids, timeout=5, modules=MW_MODULES)
    kill_all(left)
    text = "" if err is None else str(err) + "\n" + "\n".join(getattr(err, "_render_traceback_", lambda: [])())
    told = "TensorFlow is not installed in the worker's Python" in text and "--python" in text
    record("9a TensorFlow missing in the worker", detected_s=detected_s, failed_s=failed_s,
           recovered=recovered, orphans=len(left), note="hint shown" if told else "NO hint", ok=told)
    assert isinstance(err, WorkerError), repr(err)
    assert "No module named 'tensorflow'" in text  # the raw error is kept
    assert told, text  # and the user is told what to do
    assert recovered  # workers without TF still run plain Python
    assert not left


def test_9a_tensorflow_missing_with_preload_fails_at_start(python_without_tf):
    before = descendants()
    cluster = Cluster(workers=2, cpu=True, preload=True, python=python_without_tf)
    with pytest.raises(ClusterStartError) as info:
        cluster.start()
    left, _ = wait_gone(descendants() - before, timeout=5)
    kill_all(left)
    assert "tensorflow" in str(info.value) and "TensorFlow is not installed" in str(info.value)
    assert not left


# ----------------------------------------------------------------------------- 10: garbage in
MAGIC_GARBAGE = [
    ("--env TF_CONFIG={\"cluster\":{}}", "TF_CONFIG"),
    ("--env MWNOTEBOOK_WORKER_INDEX=3", "MWNOTEBOOK_WORKER_INDEX"),
    ("--workers -1", "--workers"),
    ("--workers 0", "--workers"),
    ("--workers 100000", "--workers"),
    ("--workers 99999999999999999999999", "--workers"),
    ("--workers 2.5", "--workers"),
    ("--workers two", "--workers"),
    ("--cpu --gpus-per-worker 2", "--cpu"),
    ("--cpu --env CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES"),
    ("--workers 3 --hosts a,b", "--hosts"),
    ("--workers-per-host 2", "--hosts"),
    ("--tf-address 10.0.0.1", "--hosts"),
    ("--hosts a,b --network private", "--network"),
    ("--network bogus", "--network"),
    ("--timeout -5", "--timeout"),
    ("--timeout nan", "--timeout"),
    ("--timeout inf", "--timeout"),
    ("--env A=1 --env A=2", "--env"),
    ("--env =x", "--env"),
    ("--env NOEQUALS", "--env"),
    ("--env 1BAD=x", "1BAD"),
    ("--workers 2 'unbalanced", "parse"),
    ("--no-such-flag", "--no-such-flag"),
]

API_GARBAGE = [
    (dict(workers=-1), "workers"),
    (dict(workers=10**6), "workers"),
    (dict(workers=True), "workers"),
    (dict(workers="2"), "workers"),
    (dict(env={"TF_CONFIG": "{}"}), "TF_CONFIG"),
    (dict(cpu=True, gpus_per_worker=1), "--cpu"),
    (dict(env={"X": 1}), "X"),
    (dict(startup_timeout=0), "startup_timeout"),
    (dict(network="everywhere"), "network"),
]


def _our_runtime_dirs(tmp: pathlib.Path) -> set[str]:
    """Runtime directories of clusters (the worker templates' own directory serves every cluster of
    this process, from %load_ext on, and goes with the process)."""
    return {p.name for p in tmp.glob("mwnotebook-*") if "-templates-" not in p.name}


def test_10_garbage_in(monkeypatch, tmp_path):
    """Every bad input fails before anything starts: no process, no runtime directory left."""
    from IPython.core.interactiveshell import InteractiveShell

    # mwnotebook makes its runtime directories with tempfile: point that at a directory of our own, so
    # other programs' /tmp/mwnotebook-* directories cannot blur the count.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "mwnotebook")
    before = descendants()
    problems: list[str] = []
    started = time.monotonic()

    def check(label: str, make_error, keyword: str, expected: tuple[type[BaseException], ...]) -> None:
        try:
            make_error()
        except expected as exc:
            message = str(exc)
            if keyword.lower() not in message.lower():
                problems.append(f"{label}: message does not name {keyword!r}: {message[:200]!r}")
        except BaseException as exc:  # the wrong kind of error is a finding
            problems.append(f"{label}: raised {type(exc).__name__}: {str(exc)[:200]}")
        else:
            problems.append(f"{label}: accepted")
        new = descendants() - before
        if new:
            problems.append(f"{label}: started processes {sorted(new)}")
            kill_all(new)
            wait_gone(new, timeout=5, modules=MW_MODULES)
        dirs = _our_runtime_dirs(tmp_path)
        if dirs:
            problems.append(f"{label}: left runtime directories {sorted(dirs)}")
            for name in dirs:  # so that the next case is judged on its own
                shutil.rmtree(tmp_path / name, ignore_errors=True)

    for line, keyword in MAGIC_GARBAGE:
        check(f"%%mwtrain {line}", lambda: shell.run_cell_magic("mwtrain", line, "print(1)"), keyword, (UsageError,))
    for fields, keyword in API_GARBAGE:
        check(f"Cluster({fields})", lambda: Cluster(**fields), keyword, (ConfigError,))
    check("%%mwtrain with an empty cell", lambda: shell.run_cell_magic("mwtrain", "--workers 2", "  \n"),
          "empty", (UsageError,))
    check("Cluster.run(timeout=-1) on a cluster not yet started",
          lambda: Cluster(workers=2, cpu=True).run("print(1)", timeout=-1), "timeout", (ValueError,))
    check("Cluster(spec, workers=2)", lambda: Cluster(ClusterSpec(), workers=2), "either", (TypeError,))
    # A worker interpreter that does not exist fails at start, cleanly.
    check("Cluster(python='/nonexistent/python3').start()",
          lambda: Cluster(workers=2, cpu=True, python="/nonexistent/python3").start(),
          "/nonexistent/python3", (ClusterStartError,))
    shell.run_line_magic("mwcluster", "stop")
    elapsed = time.monotonic() - started
    cases = len(MAGIC_GARBAGE) + len(API_GARBAGE) + 4
    record("10 garbage in", recovered=None, orphans=sum("started processes" in p or "left runtime" in p
                                                        for p in problems),
           note=f"{cases} inputs, {len(problems)} problems, {elapsed:.1f} s", ok=not problems)
    assert not problems, "\n".join(problems)
