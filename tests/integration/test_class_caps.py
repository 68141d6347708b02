"""The teacher's caps with real kernels: two notebook kernels of one user under
``MWNOTEBOOK_MAX_WORKERS=3`` (the second's cell refused, naming the cap and the first, starting
nothing; after the first stops, it runs), and ``CPU_LIMIT``'s thread defaults inside a worker forked
from its template (TensorFlow's inter-op pool has the share's threads).

Costs: the two kernels and their 2-worker clusters (no TensorFlow, fresh interpreters) ~15 s; the
thread test starts a template (TensorFlow imported) and 2 forked workers, ~15 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

from mwnotebook import Cluster
from mwnotebook.config.class_caps import ClassCaps

pytestmark = pytest.mark.integration

CELL = "%%mwtrain --workers 2 --no-dashboard\nimport os\nprint('ran', os.environ['MWNOTEBOOK_WORKER_INDEX'])\n"


def _run(kc: Any, code: str, timeout: float = 120) -> tuple[str, dict[str, Any]]:
    """All the text a cell printed (streams and the error's value), and its reply's content."""
    texts: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            texts.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            texts.append(msg["content"]["evalue"])
        elif msg["msg_type"] in ("display_data", "execute_result"):
            texts.append(msg["content"]["data"].get("text/plain", ""))

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    return "".join(texts), reply["content"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """This user's environment under the cap, with a runtime directory (state files) of its own."""
    return {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "MWNOTEBOOK_MAX_WORKERS": "3",
            "MWNOTEBOOK_TEMPLATE": "0"}  # fresh interpreters: no TensorFlow needed here


@pytest.fixture
def two_kernels(env: dict[str, str]) -> Iterator[list[tuple[Any, Any]]]:
    """Two notebook kernels of this user, sharing a runtime directory, under the cap."""
    kernels = []
    try:
        for _ in range(2):
            km, kc = start_new_kernel(kernel_name="python3", startup_timeout=60, env=env)
            kernels.append((km, kc))
            _, reply = _run(kc, "%load_ext mwnotebook")
            assert reply["status"] == "ok", reply
        yield kernels
    finally:
        for km, kc in kernels:
            try:
                _run(kc, "%mwcluster stop", timeout=60)
            finally:
                kc.stop_channels()
                km.shutdown_kernel(now=False)


def _descendants(pid: int) -> set[int]:
    return {p.pid for p in psutil.Process(pid).children(recursive=True)}


def test_a_second_notebook_past_the_cap_is_refused_and_starts_nothing(two_kernels: list[tuple[Any, Any]],
                                                                     env: dict[str, str], tmp_path: Path) -> None:
    (km_a, kc_a), (km_b, kc_b) = two_kernels
    pid_a, pid_b = km_a.provisioner.pid, km_b.provisioner.pid
    text, reply = _run(kc_a, CELL)
    assert reply["status"] == "ok", (text, reply)
    assert "ran 0" in text and "ran 1" in text

    before = _descendants(pid_b)
    text, reply = _run(kc_b, CELL)
    assert reply["status"] == "error" and reply["ename"] == "UsageError", reply
    assert text.startswith("UsageError: MWNOTEBOOK_MAX_WORKERS=3 (the teacher's cap"), text
    assert "it needs 2 tasks, and 2 are running (2 + 2 > 3). Nothing was started." in text
    assert f"running: a notebook kernel (pid {pid_a}): 2 tasks (cluster " in text  # the first notebook, named
    assert "`%mwcluster stop` in that notebook" in text and "clusters panel" in text
    assert "ran" not in text
    assert _descendants(pid_b) == before  # no worker, no holder, no template was started

    status, _ = _run(kc_b, "%mwcluster status")
    assert "MWNOTEBOOK_MAX_WORKERS=3" in status and "your running TensorFlow tasks: 2 of 3" in status

    _, reply = _run(kc_a, "%mwcluster stop")
    assert reply["status"] == "ok"
    text, reply = _run(kc_b, CELL)
    assert reply["status"] == "ok", (text, reply)
    assert "ran 0" in text and "ran 1" in text

    # the command is held to the same cap, and names the notebook that runs
    script = tmp_path / "script.py"
    script.write_text("print('script ran')\n")
    command = [sys.executable, "-m", "mwnotebook.frontend.cli.command", "run", "--workers", "2", "--no-report"]
    run = subprocess.run([*command, str(script)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode != 0 and "script ran" not in run.stdout, (run.stdout, run.stderr)
    assert "MWNOTEBOOK_MAX_WORKERS=3" in run.stderr and f"a notebook kernel (pid {pid_b}): 2 tasks" in run.stderr

    # a cell of other options replaces the kernel's 2 workers: they are not counted beside its 3
    text, reply = _run(kc_b, CELL.replace("--workers 2", "--workers 3"))
    assert reply["status"] == "ok", (text, reply)
    assert "ran 2" in text


THREADS = """
import collections, json, os
import tensorflow as tf
tf.linalg.matmul(tf.ones((64, 64)), tf.ones((64, 64))).numpy()
pools = collections.Counter(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
print(json.dumps({"inter_op": pools["tf_Compute"], "parent": os.getppid(),
                  **{k: os.environ.get(k) for k in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")}}))
"""


def _threads(cluster: Cluster) -> list[dict[str, Any]]:
    return [json.loads(line) for line in cluster.query(THREADS, timeout=300) if line]


@pytest.mark.tf
def test_the_cpu_share_reaches_a_worker_forked_from_a_template_without_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU_LIMIT=0.5 for 2 workers: 1 thread each. The thread variables are set in the forked child, before
    its TensorFlow runtime starts: the capped cluster's workers come from the very template an uncapped
    cluster of the same options used (started without them), and TensorFlow's inter-op pool (threads
    named ``tf_Compute``) has 1 thread in each (one per core without the cap: 2 on this machine).
    ``--env OMP_NUM_THREADS=1`` in both: OpenMP's variable is read as libraries load, so a different
    value needs a template of its own (launchers/local/template_pool.py)."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    options: dict[str, Any] = {"workers": 2, "cpu": True, "env": {"OMP_NUM_THREADS": "1"}}
    with Cluster(**options, caps=ClassCaps()) as plain:
        template = plain.launcher.template if plain.launcher is not None else None
        assert template is not None, "the workers were not forked from a template"
        without = _threads(plain)
    assert all(a["TF_NUM_INTRAOP_THREADS"] is None for a in without)
    assert [a["inter_op"] for a in without] == [os.cpu_count()] * 2  # the control: TensorFlow's default

    with Cluster(**options, caps=ClassCaps.from_environ({"CPU_LIMIT": "0.5"})) as capped:
        assert capped.thread_defaults == {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
        assert capped.launcher is not None and capped.launcher.template is template  # the same template
        answers = _threads(capped)
    assert len(answers) == 2
    for answer in answers:
        assert answer["parent"] == template.pid  # forked from it
        assert answer["TF_NUM_INTRAOP_THREADS"] == answer["TF_NUM_INTEROP_THREADS"] == "1"
        assert answer["OMP_NUM_THREADS"] == "1"
        assert answer["inter_op"] == 1, answer


@pytest.mark.tf
def test_a_capped_notebooks_first_cluster_uses_the_template_started_as_the_magic_loaded(env: dict[str, str]) -> None:
    """``%load_ext mwnotebook`` starts a worker template while the user types; under ``CPU_LIMIT`` it
    is started with the share (``OMP_NUM_THREADS`` is part of a template's identity), so the first
    cell's workers are forked from it: one TensorFlow import per notebook, not two."""
    env = {**env, "CPU_LIMIT": "1", "MWNOTEBOOK_TEMPLATE": "1"}
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=60, env=env)
    try:
        _, reply = _run(kc, "%load_ext mwnotebook")
        assert reply["status"] == "ok", reply
        text, reply = _run(kc, CELL.replace("print(", "print(os.environ['OMP_NUM_THREADS'], "), timeout=300)
        assert reply["status"] == "ok", (text, reply)
        assert "1 ran 0" in text and "1 ran 1" in text
        templates = [p for p in psutil.Process(km.provisioner.pid).children(recursive=True)
                     if "mwnotebook.processes.worker_template" in " ".join(p.cmdline())]
        assert len(templates) == 1, [p.cmdline() for p in templates]
    finally:
        try:
            _run(kc, "%mwcluster stop", timeout=60)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=False)
