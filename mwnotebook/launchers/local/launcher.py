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
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from jupyter_client.connect import write_connection_file
from jupyter_client.launcher import launch_kernel
from jupyter_client.session import new_id_bytes

from mwnotebook.config.tf_config import PortReservation, format_address
from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.local.netns import NamespaceUnavailable, NetworkNamespace
from mwnotebook.launchers.local.template_pool import (
    RUNTIME_PREFIX,
    TemplateNamespaceError,
    TemplateUnavailable,
    WorkerTemplate,
    pool,
    startup_key,
    templates_disabled,
)

log = logging.getLogger(__name__)

#: Variables removed from the notebook's environment before it is handed to a worker: they describe
#: the notebook's own kernel or a TF_CONFIG meant for somebody else.
_DROPPED_ENV = ("TF_CONFIG", "JPY_PARENT_PID", "JPY_SESSION_NAME", "MPLBACKEND", "PYDEVD_USE_FRAME_EVAL")




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

    def _alive_now(self) -> bool:
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
        return self._alive_now()

    def exit_description(self) -> str:
        if self._alive_now():
            return ""
        code = self._template.exit_status(self._pid)
        if code is None:  # the template has not reaped it yet, or is gone itself
            time.sleep(0.05)
            code = self._template.exit_status(self._pid)
        return describe_returncode(code) if code is not None else "ended"

    async def kill(self) -> None:
        if self._alive_now():
            try:
                os.killpg(self._pid, signal.SIGKILL)  # it leads its own session (setsid after fork)
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(self._pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while self._alive_now() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if self._pidfd is not None and self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        self._remove_files()


class LocalLauncher:
    """Starts worker kernels on this machine (see :class:`mwnotebook.launchers.base.Launcher`).

    With ``startup_env`` (the environment every worker of the cluster shares: what
    :meth:`ClusterSpec.worker_env` gives, minus per-worker values) and templates on, workers are
    forked from a worker template that has TensorFlow imported already (see launchers/local/template_pool.py);
    the template also holds the private network namespace. Without it, or when no template can serve,
    each worker is a fresh interpreter (``python -m mwnotebook.processes.worker_kernel``).
    """

    def __init__(self, python: str | None = None, network: str = "auto",
                 startup_env: Mapping[str, str] | None = None, template: bool = True) -> None:
        self.python = (shutil.which(python) or python) if python else sys.executable
        self.network = network
        remove_stale_runtime_dirs()
        # mkdtemp makes it 0700; the pid in the name lets a later launcher clean up after a notebook
        # kernel that was killed before it could remove its own directory.
        self.runtime_dir = tempfile.mkdtemp(prefix=f"{RUNTIME_PREFIX}{os.getpid()}-")
        self._reservation: PortReservation | None = None
        self._namespace: NetworkNamespace | None = None
        self._ports: list[int] = []
        self._startup_env = dict(startup_env) if startup_env is not None else None
        self.use_template = template and startup_env is not None and not templates_disabled()
        self._template: WorkerTemplate | None = None
        self._template_ports: list[int] = []
        self._private_template: WorkerTemplate | None = None  # whose network namespace the workers share
        self._forked: list[ForkedKernelHandle] = []
        self._fallback_lock: asyncio.Lock | None = None
        self.network_note = ""
        self.template_note = ""

    @property
    def isolated(self) -> bool:
        """True when the workers' TensorFlow ports live in a private network namespace."""
        return self._namespace is not None or self._private_template is not None

    @property
    def template(self) -> WorkerTemplate | None:
        """The template this launcher forks workers from (None: fresh interpreters)."""
        return self._template

    async def tf_addresses(self, count: int) -> list[str]:
        if not self._ports:
            await self._place_ports(count)
        return [format_address("127.0.0.1", port) for port in self._ports]

    async def _place_ports(self, count: int) -> None:
        self._check_interpreter()  # before a template is started with it
        if self.use_template:
            try:
                await self._place_with_template(count)
                return
            except TemplateUnavailable as exc:
                self._give_up_template(exc)
        if self.network in ("auto", "private"):
            try:
                # The holder runs the notebook's own Python, which surely has mwnotebook.
                self._namespace = await NetworkNamespace.create(count)
                self._ports = list(self._namespace.ports)
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
        self._ports = list(self._reservation.ports)

    async def _place_with_template(self, count: int) -> None:
        """Find (or start) the template and reserve the TF ports where its workers will live."""
        env = worker_process_env(self._startup_env or {})
        private = self.network in ("auto", "private")
        try:
            template = pool.get(self.python, env, private)
            await template.wait_ready()
        except TemplateNamespaceError as exc:
            if self.network != "auto":
                raise
            template = pool.get(self.python, env, False)  # where no namespace can be made: the host network
            await template.wait_ready()
            private = False
            self.network_note = f"no private network namespace ({exc})"
            log.warning("TensorFlow ports stay on the host network: %s", exc)
        if private:
            self._template_ports = await template.reserve_ports(count)
            self._ports = list(self._template_ports)
            self._private_template = template
        else:
            self._reservation = PortReservation.reserve(count)
            self._ports = list(self._reservation.ports)
        self._template = template

    def _give_up_template(self, exc: Exception) -> None:
        if not self.template_note:
            self.template_note = f"workers start as fresh interpreters: {exc}"
            log.warning("mwnotebook: no worker template (%s); starting workers the slow way", exc)
        self.use_template = False
        self._template = None

    def _check_interpreter(self, index: int = 0) -> None:
        if not (os.path.isfile(self.python) and os.access(self.python, os.X_OK)):
            raise ClusterStartError(
                f"worker {index}: the Python interpreter {self.python!r} does not exist or is not executable; "
                "pass --python with the path of a Python that has ipykernel and TensorFlow", worker=index)

    async def start(self, index: int, env: Mapping[str, str]) -> LocalKernelHandle:
        self._check_interpreter(index)
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
        full_env = worker_process_env(env)
        log_path = os.path.join(self.runtime_dir, f"{name}.log")
        # No IPython history in workers: it is one SQLite file that every worker would write and
        # lock on every cell (the notebook keeps the history of what was run).
        kernel_args = ["-f", connection_file, "--HistoryManager.enabled=False"]
        template = self._template
        if template is not None and startup_key(self.python, template.private_network, full_env) == template.key:
            try:
                pid = await template.fork(full_env, kernel_args, log_path, os.getcwd())
                handle = ForkedKernelHandle(index, pid, template, dict(info), connection_file, log_path)
                self._forked.append(handle)
                log.debug("forked worker %d as pid %d from template %d", index, pid, template.pid)
                return handle
            except TemplateUnavailable as exc:
                await self._fall_back(index, exc)
        cmd = [self.python, "-m", "mwnotebook.processes.worker_kernel", *kernel_args]
        cmd = await self._exec_prefix() + cmd
        with open(log_path, "wb") as log_file:
            process = await asyncio.to_thread(
                launch_kernel, cmd, stdin=subprocess.DEVNULL, stdout=log_file.fileno(), stderr=log_file.fileno(),
                env=full_env, cwd=os.getcwd())
        log.debug("started worker %d as pid %d", index, process.pid)
        return LocalKernelHandle(index, process, dict(info), connection_file, log_path)

    async def _fall_back(self, index: int, exc: Exception) -> None:
        """The template could not fork: go on with fresh interpreters, unless that would split the
        cluster between two network namespaces (its workers forked earlier are still running)."""
        if self._private_template is not None and any(h._alive_now() for h in self._forked):  # noqa: SLF001 - same module
            raise ClusterStartError(
                f"worker {index}: {exc}. Other workers of this cluster are running in its network "
                "namespace; run the cell again to start all of them afresh", worker=index) from None
        self._give_up_template(exc)

    async def _exec_prefix(self) -> list[str]:
        """How a fresh interpreter joins this cluster's network namespace ([] on the host network)."""
        if self._namespace is not None:
            return self._namespace.command_prefix()
        holder = self._private_template
        if holder is None:
            return []
        if self._fallback_lock is None:
            self._fallback_lock = asyncio.Lock()
        async with self._fallback_lock:
            if holder.alive():
                return holder.enter_prefix()
            if self._namespace is None:
                # The template held the namespace and is gone. A fresh namespace has every port free,
                # so the TF_CONFIGs (already handed out) stay valid.
                try:
                    self._namespace = await NetworkNamespace.create(len(self._ports))
                except NamespaceUnavailable as exc:
                    raise ClusterStartError(f"the cluster's network namespace is gone and no new one can be "
                                            f"made ({exc}); run %mwcluster stop and start again") from None
            return self._namespace.command_prefix()

    async def close(self) -> None:
        if self._template_ports and self._private_template is not None:
            await self._private_template.release_ports(self._template_ports)
            self._template_ports = []
        self._private_template = None
        self._template = None
        self._forked = []
        if self._namespace is not None:
            self._namespace.close()
            self._namespace = None
        if self._reservation is not None:
            self._reservation.release()
            self._reservation = None
        self._ports = []
        shutil.rmtree(self.runtime_dir, ignore_errors=True)


def worker_process_env(env: Mapping[str, str]) -> dict[str, str]:
    """A local worker's whole environment: the notebook's (minus what belongs to it alone) + ``env``."""
    full_env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    full_env.update(env)
    full_env["MWNOTEBOOK_PARENT_PID"] = str(os.getpid())
    full_env["PYTHONUNBUFFERED"] = "1"
    return full_env


async def prestart_template(python: str | None = None, env: Mapping[str, str] | None = None,
                            network: str = "auto") -> WorkerTemplate | None:
    """Start (and wait for) the template a cluster with these options would use.

    ``env`` is the cluster's shared worker environment (default: that of ``ClusterSpec()``).
    Returns None when templates are off or none can be started here (clusters will say why).
    """
    if templates_disabled():
        return None
    if env is None:
        from mwnotebook.config.spec import ClusterSpec
        from mwnotebook.config.worker_env import startup_env

        env = startup_env(ClusterSpec())
    interpreter = (shutil.which(python) or python) if python else sys.executable
    try:
        template = pool.get(interpreter, worker_process_env(env), network in ("auto", "private"))
        await template.wait_ready()
        return template
    except TemplateUnavailable as exc:
        log.debug("no worker template in advance: %s", exc)
        return None


def prestart_in_background() -> None:
    """``%load_ext mwnotebook``: begin importing TensorFlow in a template while the user types.

    A short-lived thread is enough: the template does not die with the thread that started it
    (it watches the notebook process, not its parent thread).
    """
    if not templates_disabled():
        threading.Thread(target=asyncio.run, args=(prestart_template(),), name="mwnotebook-prestart",
                         daemon=True).start()
