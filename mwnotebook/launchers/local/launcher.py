"""Local worker kernels: ipykernel processes on this machine, reachable only through unix sockets.

Each launcher owns a private runtime directory (mode 0700). Every kernel gets its own connection
file (0600, written by jupyter_client) and its own IPC socket path inside it: default IPC paths
collide between kernels (measured: "Invalid Signature"), and TCP would expose the kernel's channels
to the network. The signing key lives only in the connection file, never on a command line.

The started kernels' handles are in launchers/local/handles.py; starting a worker template ahead of
the first cluster is in launchers/local/prestart.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping

from jupyter_client.connect import write_connection_file
from jupyter_client.launcher import launch_kernel
from jupyter_client.session import new_id_bytes

from mwnotebook.config.tf_config import PortReservation, format_address
from mwnotebook.errors import CannotRestartError, ClusterStartError
from mwnotebook.launchers.local.handles import ForkedKernelHandle, LocalKernelHandle
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
            # Trying again cannot bring it back; the next cell starts the cluster afresh
            # (engine/async_cluster.py, AsyncCluster.start): a new launcher, a new namespace.
            raise CannotRestartError(
                "the private network namespace of this cluster is gone (its holder process ended); "
                "the next cell starts a fresh cluster in a new one", worker=index)
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
        if self._private_template is not None and any(h.alive_now() for h in self._forked):
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
