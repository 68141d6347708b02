"""The handles of started local worker kernels: liveness, exit status, log tail, interrupt, kill.

A kernel the launcher started itself is its child (:class:`LocalKernelHandle`); one a worker
template forked is not (:class:`ForkedKernelHandle`), so it is watched differently. Both remove
the kernel's connection file and IPC sockets once it is gone.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import time
from typing import Any

from mwnotebook.launchers.local.template_pool import WorkerTemplate


def describe_returncode(code: int | None) -> str:
    """``killed by SIGKILL`` / ``exit code 1`` / '' (still running)."""
    if code is None:
        return ""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class LocalKernelHandle:
    """One local worker kernel process (see :class:`mwnotebook.launchers.base.KernelHandle`)."""

    host = "localhost"
    on_this_machine = True

    def __init__(self, index: int, process: subprocess.Popen[bytes] | None, connection_info: dict[str, Any],
                 connection_file: str, log_path: str) -> None:
        self.index = index
        self._process = process
        self._connection_info = connection_info
        self.connection_file = connection_file
        self.log_path = log_path

    @property
    def connection_info(self) -> dict[str, Any]:
        return self._connection_info

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def is_alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def exit_description(self) -> str:
        return describe_returncode(self._process.poll()) if self._process is not None else ""

    def log_tail(self, lines: int = 20) -> str:
        """The end of the kernel's own stdout/stderr (start-up errors land there, not on IOPub)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""

    async def interrupt(self) -> None:
        if await self.is_alive() and self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    async def kill(self) -> None:
        assert self._process is not None
        if self._process.poll() is None:
            try:
                # The kernel leads its own session (start_new_session): take its children too.
                os.killpg(self._process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self._process.kill()
        await asyncio.to_thread(self._process.wait)
        self._remove_files()

    def _remove_files(self) -> None:
        prefix = self._connection_info.get("ip", "")
        for key in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"):
            path = f"{prefix}-{self._connection_info.get(key)}"
            if prefix and os.path.exists(path):
                os.remove(path)
        if os.path.exists(self.connection_file):
            os.remove(self.connection_file)


class ForkedKernelHandle(LocalKernelHandle):
    """A worker kernel forked from a :class:`~mwnotebook.launchers.local.template_pool.WorkerTemplate`.

    The notebook is not its parent, so it is watched through a pidfd (exact, no pid reuse) and its
    exit status comes from the template, which reaps it.
    """

    def __init__(self, index: int, pid: int, template: WorkerTemplate, connection_info: dict[str, Any],
                 connection_file: str, log_path: str) -> None:
        super().__init__(index, None, connection_info, connection_file, log_path)
        self._pid = pid
        self._template = template
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self._pidfd = -1  # already gone
        except (AttributeError, OSError):
            self._pidfd = None

    @property
    def pid(self) -> int | None:
        return self._pid

    def alive_now(self) -> bool:
        if self._pidfd == -1:
            return False
        if self._pidfd is not None:
            return not select.select([self._pidfd], [], [], 0)[0]
        if self._template.exit_status(self._pid) is not None:
            return False
        try:
            os.kill(self._pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    async def is_alive(self) -> bool:
        return self.alive_now()

    def exit_description(self) -> str:
        if self.alive_now():
            return ""
        code = self._template.exit_status(self._pid)
        if code is None:  # the template has not reaped it yet, or is gone itself
            time.sleep(0.05)
            code = self._template.exit_status(self._pid)
        return describe_returncode(code) if code is not None else "ended"

    async def kill(self) -> None:
        if self.alive_now():
            try:
                os.killpg(self._pid, signal.SIGKILL)  # it leads its own session (setsid after fork)
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(self._pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while self.alive_now() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if self._pidfd is not None and self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        self._remove_files()
