"""Workers end with the notebook kernel that owns them: on restart and on shutdown."""

from __future__ import annotations

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

from testbed.processes import WORKER_MODULES, is_worker, wait_gone

pytestmark = pytest.mark.integration


def run(kc, code: str) -> dict:
    reply = kc.execute_interactive(code, timeout=120, output_hook=lambda msg: None)
    assert reply["content"]["status"] == "ok", reply["content"]
    return reply


def worker_pids(kernel_pid: int) -> set[int]:
    return {p.pid for p in psutil.Process(kernel_pid).children(recursive=True) if is_worker(p)}


@pytest.mark.parametrize("how", ["restart", "shutdown"])
def test_workers_end_with_the_notebook_kernel(how):
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        run(kc, "%load_ext mwnotebook")
        run(kc, "%%mwtrain --workers 2 --no-dashboard\nprint('up')")
        pids = worker_pids(km.provisioner.process.pid)
        assert len(pids) == 2
        if how == "restart":
            km.restart_kernel(now=False)
        else:
            kc.stop_channels()
            km.shutdown_kernel(now=False)
        assert not wait_gone(pids, 5, WORKER_MODULES)[0], f"workers outlived the notebook kernel's {how}"
    finally:
        if km.is_alive():
            kc.stop_channels()
            km.shutdown_kernel(now=True)
