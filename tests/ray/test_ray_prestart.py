"""What ``%load_ext mwnotebook`` prepares in a real notebook kernel: Ray (imported on a thread, no
local worker template) when the kernel's environment names a Ray cluster (``RAY_ADDRESS``), a local
worker template otherwise (launchers/ray/prestart.py); and a ``--ray auto`` cell works on the Ray
the thread imported."""

from __future__ import annotations

import pytest

from testbed import ray_nodes
from testbed.notebook_kernel import Notebook
from tests._shared.waits import wait_for

pytestmark = pytest.mark.ray

#: A cell that waits (bounded) until the prestart thread has ended, then says what it finds, without
#: importing Ray itself.
PREPARED = """
import sys, threading, time
deadline = time.monotonic() + 120
while any(t.name == "mwnotebook-ray-prestart" for t in threading.enumerate()) and time.monotonic() < deadline:
    time.sleep(0.1)
ray = sys.modules.get("ray")
print("ray imported:", ray is not None and hasattr(ray, "init"))
"""
TEMPLATE = "mwnotebook.processes.worker_template"


def test_a_notebook_naming_a_ray_cluster_imports_ray_and_starts_no_local_template(
        ray_env: ray_nodes.RayTestCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", ray_env.address)
    nb = Notebook()
    try:
        reply, text, _ = nb.execute("%load_ext mwnotebook", timeout=60)
        assert reply["content"]["status"] == "ok", text
        reply, text, _ = nb.execute(PREPARED, timeout=180)
        assert "ray imported: True" in text, text
        assert not nb.workers((TEMPLATE,)), "a local worker template was started in a Ray notebook"
        reply, text, _ = nb.execute("%%mwtrain --workers 2 --cpu --ray auto\n"
                                    "import os\nprint('bundle of', os.environ['MWNOTEBOOK_WORKER_INDEX'])",
                                    timeout=300)
        assert reply["content"]["status"] == "ok", text
        for i in range(2):
            assert f"[worker {i}] bundle of {i}" in text, text
    finally:
        nb.close()


def test_a_notebook_without_ray_address_starts_a_local_template_and_leaves_ray_unimported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    nb = Notebook()
    try:
        reply, text, _ = nb.execute("%load_ext mwnotebook", timeout=60)
        assert reply["content"]["status"] == "ok", text
        # the prestart thread starts it after %load_ext has returned (a loaded CI machine: not yet at once)
        wait_for(lambda: nb.workers((TEMPLATE,)), 60, what="a local worker template started by %load_ext")
        reply, text, _ = nb.execute(PREPARED, timeout=180)
        assert "ray imported: False" in text, text
    finally:
        nb.close()
