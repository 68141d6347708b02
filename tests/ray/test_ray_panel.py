"""A Ray cluster in the clusters panel's registry: published as ``ray`` with its workers
marked remote, as the Ray launcher's handles state. Its notebook process SIGKILLed, the sweep kills
nothing from here (the workers' pid numbers are live processes of this machine in this test cluster,
whose nodes share its pid namespace: on a real cluster they would be unrelated processes), and Ray
ends the dead driver's relay actors, agents and kernels itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from mwnotebook.registry import orphans, state
from testbed import ray_nodes
from tests._shared.waits import wait_for

pytestmark = pytest.mark.ray


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_notebooks_ray_workers_are_not_signalled_by_the_sweep_and_ray_ends_them(
        ray_env: ray_nodes.RayTestCluster, tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import time
        from mwnotebook import Cluster
        cluster = Cluster(ray={ray_env.address!r}, cpu=True, template=False)
        cluster.start()
        print("started", flush=True)
        time.sleep(600)
    """)
    directory = tmp_path / "rt" / "mwnotebook"
    notebook = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, **ray_env.env(), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")})
    try:
        assert notebook.stdout is not None and notebook.stdout.readline().strip() == "started"
        path, doc = wait_for(lambda: [(p, d) for p, d in state.read_all(directory)
                                                if d["state"] == "idle" and d["workers"]
                                                and all(w["pid"] for w in d["workers"])], 30)[0]
        kernels = [w["pid"] for w in doc["workers"]]
        assert all(running(pid) for pid in kernels)  # a live local process has each remote pid number here
        notebook.send_signal(signal.SIGKILL)
        notebook.wait(10)
        shown = orphans.sweep_one(path, doc)
        assert shown is not None and shown["state"] == "orphaned" and shown["cleanup"] == []
        assert doc["engine"] == "ray" and not any(w["local"] or w["pid_start"] for w in doc["workers"])
        wait_for(lambda: not ray_env.actor_pids() and not any(running(p) for p in kernels), 60)
        wait_for(lambda: orphans.sweep_one(path, state.read_state(path) or doc) is None, 15)
    finally:
        if notebook.poll() is None:
            notebook.kill()
            notebook.wait(10)
        if notebook.stdout is not None:
            notebook.stdout.close()
