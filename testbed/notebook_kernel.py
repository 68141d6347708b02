"""A real notebook kernel (python3, through jupyter_client) driven the way a Jupyter front end drives
one: submit a cell, collect its output until the kernel is idle, count the mwnotebook processes
below it, and close it leaving nothing behind (tests/reliability, tests/tf)."""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from testbed.processes import MW_MODULES, descendants, kill_all, wait_gone

ROOT = Path(__file__).resolve().parents[1]


class Notebook:
    """A real notebook kernel (python3, via jupyter_client), the way a Jupyter front end drives one."""

    def __init__(self) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(ROOT), env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self._iopub: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid  # type: ignore[union-attr]

    def submit(self, code: str) -> str:
        return self.kc.execute(code, allow_stdin=False, stop_on_error=False)

    def collect(self, msg_id: str, timeout: float) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
        """Wait for the cell to finish: (execute_reply message, stream text, all its output messages)."""
        deadline = time.monotonic() + timeout
        outputs: list[dict[str, Any]] = []
        idle = False
        while not idle:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = [(m["msg_type"], str(m["content"].get("text") or m["content"].get("ename") or "")[-300:])
                        for m in outputs[-8:]]
                procs = {p.pid: (p.status(), p.cmdline()[1:3]) for p in psutil.Process(self.pid).children(True)}
                raise AssertionError(f"the notebook cell did not finish within {timeout} s; last outputs "
                                     f"{seen}; kernel's children {procs}")
            try:
                msg = self.kc.get_iopub_msg(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
            elif msg["msg_type"] in ("stream", "error", "display_data", "execute_result"):
                outputs.append(msg)
        while True:
            reply = self.kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                break
        text = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
        return reply, text, outputs

    def execute(self, code: str, timeout: float = 240) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
        return self.collect(self.submit(code), timeout)

    def workers(self, modules: tuple[str, ...] = MW_MODULES) -> set[int]:
        """The notebook's mwnotebook processes (by default worker kernels and namespace holders)."""
        return descendants(self.pid, modules) if self.km.is_alive() else set()

    def close(self) -> None:
        """Stop the notebook's cluster, then the kernel; kill whatever it left (by pid)."""
        pids = self.workers()
        try:
            if self.km.is_alive():
                self.execute("%mwcluster stop", timeout=30)
        except Exception:  # clean-up goes on
            pass
        self.kc.stop_channels()
        try:
            if self.km.is_alive():
                self.km.shutdown_kernel(now=True)
            else:  # killed by the test: only its files are left to remove
                self.km.cleanup_resources()
        except Exception:
            pass
        kill_all(wait_gone(pids, 10, MW_MODULES)[0])
