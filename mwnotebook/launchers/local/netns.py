"""Private network namespaces for local clusters, so TensorFlow's unauthenticated gRPC ports are
unreachable from other machines (TF binds them on all interfaces whatever TF_CONFIG says)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys

log = logging.getLogger(__name__)


class NamespaceUnavailable(RuntimeError):
    """This machine or user cannot make a network namespace."""


class NetworkNamespace:
    """A holder process inside a fresh network namespace, and how to start programs inside it."""

    def __init__(self, process: subprocess.Popen[str], ports: list[int], user_ns: bool) -> None:
        self._process = process
        self.ports = ports
        self._user_ns = user_ns

    @classmethod
    async def create(cls, port_count: int, python: str | None = None) -> NetworkNamespace:
        if not sys.platform.startswith("linux") or not shutil.which("unshare") or not shutil.which("nsenter"):
            raise NamespaceUnavailable("unshare/nsenter (util-linux) are not available")
        user_ns = os.geteuid() != 0
        cmd = ["unshare", "--net"] + (["--user", "--map-root-user"] if user_ns else [])
        cmd += ["--", python or sys.executable, "-m", "mwnotebook.processes.netns_holder", str(port_count)]
        # Its own session: the notebook's stop button signals the notebook kernel's process group,
        # which must not take the namespace (and with it every worker restart) down.
        process = await asyncio.to_thread(
            subprocess.Popen, cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), timeout=15)
        except asyncio.TimeoutError:
            process.kill()
            raise NamespaceUnavailable("the namespace holder did not answer within 15 s") from None
        if not line.strip():
            process.kill()
            err = process.stderr.read() if process.stderr else ""
            raise NamespaceUnavailable(err.strip().splitlines()[-1] if err.strip() else "unshare failed")
        return cls(process, [int(p) for p in line.split()], user_ns)

    def command_prefix(self) -> list[str]:
        """Prefix that runs a command inside the namespace (same pid: nsenter execs)."""
        pid = self._process.pid
        prefix = ["nsenter", f"--net=/proc/{pid}/ns/net"]
        if self._user_ns:
            prefix += [f"--user=/proc/{pid}/ns/user", "--preserve-credentials"]
        return prefix + ["--"]

    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        for stream in (self._process.stdin, self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()
