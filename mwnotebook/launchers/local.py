"""Local worker kernels: ipykernel processes on this machine, reachable only through unix sockets.

Each launcher owns a private runtime directory (mode 0700). Every kernel gets its own connection
file (0600, written by jupyter_client) and its own IPC socket path inside it: default IPC paths
collide between kernels (measured: "Invalid Signature"), and TCP would expose the kernel's channels
to the network. The signing key lives only in the connection file, never on a command line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping
from typing import Any

from jupyter_client.connect import write_connection_file
from jupyter_client.launcher import launch_kernel
from jupyter_client.session import new_id_bytes

from mwnotebook.config.tf_config import PortReservation, format_address
from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.netns import NamespaceUnavailable, NetworkNamespace

log = logging.getLogger(__name__)

#: Variables removed from the notebook's environment before it is handed to a worker: they describe
#: the notebook's own kernel or a TF_CONFIG meant for somebody else.
_DROPPED_ENV = ("TF_CONFIG", "JPY_PARENT_PID", "JPY_SESSION_NAME", "MPLBACKEND", "PYDEVD_USE_FRAME_EVAL")


RUNTIME_PREFIX = "mwnotebook-run-"


def remove_stale_runtime_dirs(parent: str | None = None) -> list[str]:
    """Delete this user's runtime directories whose owning process no longer exists."""
    parent = parent or tempfile.gettempdir()
    removed = []
    for name in os.listdir(parent):
        if not name.startswith(RUNTIME_PREFIX):
            continue
        path = os.path.join(parent, name)
        owner = name[len(RUNTIME_PREFIX):].split("-", 1)[0]
        try:
            if not owner.isdigit() or os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(owner), 0)  # raises if that process is gone
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:
            continue
    return removed


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

    def __init__(self, index: int, process: subprocess.Popen[bytes], connection_info: dict[str, Any],
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
        return self._process.pid

    async def is_alive(self) -> bool:
        return self._process.poll() is None

    def exit_description(self) -> str:
        return describe_returncode(self._process.poll())

    def log_tail(self, lines: int = 20) -> str:
        """The end of the kernel's own stdout/stderr (start-up errors land there, not on IOPub)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""

    async def interrupt(self) -> None:
        if self._process.poll() is None:
            try:
                os.kill(self._process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    async def kill(self) -> None:
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


class LocalLauncher:
    """Starts worker kernels on this machine (see :class:`mwnotebook.launchers.base.Launcher`)."""

    def __init__(self, python: str | None = None, network: str = "auto") -> None:
        self.python = (shutil.which(python) or python) if python else sys.executable
        self.network = network
        remove_stale_runtime_dirs()
        # mkdtemp makes it 0700; the pid in the name lets a later launcher clean up after a notebook
        # kernel that was killed before it could remove its own directory.
        self.runtime_dir = tempfile.mkdtemp(prefix=f"{RUNTIME_PREFIX}{os.getpid()}-")
        self._reservation: PortReservation | None = None
        self._namespace: NetworkNamespace | None = None
        self.network_note = ""

    @property
    def isolated(self) -> bool:
        """True when the workers' TensorFlow ports live in a private network namespace."""
        return self._namespace is not None

    async def tf_addresses(self, count: int) -> list[str]:
        if self._namespace is None and self._reservation is None:
            await self._place_ports(count)
        ports = self._namespace.ports if self._namespace else self._reservation.ports  # type: ignore[union-attr]
        return [format_address("127.0.0.1", port) for port in ports]

    async def _place_ports(self, count: int) -> None:
        if self.network in ("auto", "private"):
            try:
                # The holder runs the notebook's own Python, which surely has mwnotebook.
                self._namespace = await NetworkNamespace.create(count)
                return
            except NamespaceUnavailable as exc:
                if self.network == "private":
                    raise ClusterStartError(
                        f"--network private: cannot make a network namespace here ({exc}). Use "
                        "--network host on a trusted network, or allow user namespaces "
                        "(sysctl kernel.unprivileged_userns_clone=1).") from None
                self.network_note = f"no private network namespace ({exc})"
                log.warning("TensorFlow ports stay on the host network: %s", exc)
        self._reservation = PortReservation.reserve(count)

    async def start(self, index: int, env: Mapping[str, str]) -> LocalKernelHandle:
        if not (os.path.isfile(self.python) and os.access(self.python, os.X_OK)):
            raise ClusterStartError(
                f"worker {index}: the Python interpreter {self.python!r} does not exist or is not executable; "
                "pass --python with the path of a Python that has ipykernel and TensorFlow", worker=index)
        if self._namespace is not None and not self._namespace.alive():
            raise ClusterStartError(
                "the private network namespace of this cluster is gone (its holder process ended); "
                "run %mwcluster stop and start again", worker=index)
        name = f"worker-{index}-{uuid.uuid4().hex[:8]}"
        connection_file = os.path.join(self.runtime_dir, f"{name}.json")
        # IPC paths must stay short (unix socket paths are limited to ~107 bytes).
        _, info = write_connection_file(
            connection_file, transport="ipc", ip=os.path.join(self.runtime_dir, name),
            key=new_id_bytes())
        full_env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
        full_env.update(env)
        full_env["MWNOTEBOOK_PARENT_PID"] = str(os.getpid())
        full_env["PYTHONUNBUFFERED"] = "1"
        log_path = os.path.join(self.runtime_dir, f"{name}.log")
        # No IPython history in workers: it is one SQLite file that every worker would write and
        # lock on every cell (the notebook keeps the history of what was run).
        cmd = [self.python, "-m", "mwnotebook.launchers.entry.worker_kernel", "-f", connection_file,
               "--HistoryManager.enabled=False"]
        if self._namespace is not None:
            cmd = self._namespace.command_prefix() + cmd
        with open(log_path, "wb") as log_file:
            process = await asyncio.to_thread(
                launch_kernel, cmd, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                env=full_env, cwd=os.getcwd())
        log.debug("started worker %d as pid %d", index, process.pid)
        return LocalKernelHandle(index, process, dict(info), connection_file, log_path)

    async def close(self) -> None:
        if self._namespace is not None:
            self._namespace.close()
            self._namespace = None
        if self._reservation is not None:
            self._reservation.release()
            self._reservation = None
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
