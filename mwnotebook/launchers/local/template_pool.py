"""Worker templates, seen from the notebook: start them, ask them to fork worker kernels, keep one per
start-up environment for the life of the notebook process.

A template (``processes/worker_template.py``) is a process that has imported TensorFlow and
ipykernel and nothing more; a forked child of it is a worker kernel that skips the 2-2.7 s import.
One template serves every cluster of this notebook whose workers would load TensorFlow the same way:
same interpreter, same load-time variables (:func:`startup_key`), same network placement. With a
private network, the template itself is started by ``unshare --net``: it holds the namespace, its
children are born in it, and it reserves the TF ports there.

The channel is a socketpair inherited by the template (no filesystem path); it carries JSON lines,
never the connection key (fork requests name the 0600 connection file).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import itertools
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

#: Prefix of every private runtime directory of this package in the temp dir (the local launcher's
#: per-cluster directories and the templates' own); stale ones are swept by the local launcher.
RUNTIME_PREFIX = "mwnotebook-run-"

#: Variables each worker gets on its own; set in the forked child, so they are not part of a
#: template's identity. CUDA_VISIBLE_DEVICES is read when CUDA initialises (the first device
#: query), never while TensorFlow loads.
PER_WORKER_ENV = frozenset({"TF_CONFIG", "CUDA_VISIBLE_DEVICES", "MWNOTEBOOK_WORKER_INDEX",
                            "MWNOTEBOOK_NUM_WORKERS", "MWNOTEBOOK_PARENT_PID"})

#: TensorFlow variables read when the runtime starts (the GPU allocator, the thread pools), not while
#: it loads; set in the child like the per-worker ones, so that a one-worker and a two-worker cluster
#: share a template. TF_NUM_*_THREADS measured taking effect in a forked worker: tests/integration/
#: test_class_caps.py (a worker's thread count with and without them).
RUNTIME_ENV = frozenset({"TF_FORCE_GPU_ALLOW_GROWTH", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"})

#: Name prefixes of variables that may be read while the interpreter, TensorFlow or a native library
#: loads (interpreter set-up, dynamic linker, TF/XLA/CUDA/NCCL flags, OpenMP/MKL/BLAS thread pools,
#: Keras backend). A worker whose value differs needs a template of its own. Erring on the side of
#: "load-time" only costs an extra template.
LOAD_TIME_PREFIXES = ("TF_", "XLA_", "PYTHON", "LD_", "CUDA_", "NCCL_", "TPU_", "OMP_", "KMP_", "MKL",
                      "OPENBLAS", "GOTO", "KERAS_", "GRPC_", "MALLOC", "JAX_", "ABSL", "PYDEVD")

#: Set to 0 to turn worker templates off for every cluster of this process (like ``--no-template``).
DISABLE_VARIABLE = "MWNOTEBOOK_TEMPLATE"

READY_TIMEOUT = 120.0  # importing TensorFlow on a loaded 2-core machine has taken > 10 s


class TemplateUnavailable(RuntimeError):
    """No template can serve this start (it failed to start, or died)."""


class TemplateNamespaceError(TemplateUnavailable):
    """The template could not be started inside a private network namespace."""


def templates_disabled() -> bool:
    """Off by ``MWNOTEBOOK_TEMPLATE=0``, or where processes cannot fork (not POSIX)."""
    return not hasattr(os, "fork") or \
        os.environ.get(DISABLE_VARIABLE, "1").strip().lower() in ("0", "false", "no", "off")


def is_load_time(name: str) -> bool:
    return name not in PER_WORKER_ENV and name not in RUNTIME_ENV and name.startswith(LOAD_TIME_PREFIXES)


def startup_key(python: str, private_network: bool, env: Mapping[str, str]) -> tuple[Any, ...]:
    """What makes two workers loadable from the same template."""
    return (python, private_network, tuple(sorted((k, v) for k, v in env.items() if is_load_time(k))))


def template_env(env: Mapping[str, str]) -> dict[str, str]:
    """A worker's full environment without what differs from worker to worker."""
    return {k: v for k, v in env.items() if k not in PER_WORKER_ENV}


def namespace_prefix(pid: int, user_ns: bool) -> list[str]:
    """``nsenter`` prefix that runs a command in the network namespace of process ``pid``."""
    prefix = ["nsenter", f"--net=/proc/{pid}/ns/net"]
    if user_ns:
        prefix += [f"--user=/proc/{pid}/ns/user", "--preserve-credentials"]
    return prefix + ["--"]


class WorkerTemplate:
    """One template process and its channel. Thread-safe; ``async`` methods work on any loop."""

    def __init__(self, key: tuple[Any, ...], python: str, env: Mapping[str, str], private_network: bool,
                 directory: str) -> None:
        self.key = key
        self.private_network = private_network
        self.user_ns = private_network and os.geteuid() != 0
        self.log_path = os.path.join(directory, f"template-{len(os.listdir(directory))}.log")
        ours, theirs = socket.socketpair()
        cmd = [python, "-m", "mwnotebook.processes.worker_template", "--channel", str(theirs.fileno()),
               "--parent", str(os.getpid())]
        if private_network:
            cmd = ["unshare", "--net"] + (["--user", "--map-root-user"] if self.user_ns else []) + \
                ["--"] + cmd + ["--netns"]
        with open(self.log_path, "ab") as log_file:
            # Its own session: the notebook's stop button signals the notebook's process group.
            self._process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, env=dict(env),
                pass_fds=(theirs.fileno(),), start_new_session=True, cwd=os.getcwd())
        theirs.close()
        self._channel = ours
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, concurrent.futures.Future[dict[str, Any]]] = {}
        self._exits: dict[int, int] = {}
        self._hello: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self._ready: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self._closed = False
        #: time.monotonic() when started, and when TensorFlow was imported (benchmarks read them).
        self.started_at = time.monotonic()
        self.ready_at: float | None = None
        self._reader = threading.Thread(target=self._read, name="mwnotebook-template-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return not self._closed and self._process.poll() is None

    def exit_status(self, pid: int) -> int | None:
        """A forked child's exit code as the template saw it (negative: killed by that signal)."""
        return self._exits.get(pid)

    def ready_info(self) -> dict[str, Any] | None:
        return self._ready.result() if self._ready.done() and not self._ready.exception() else None

    # ------------------------------------------------------------------ channel
    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                data = self._channel.recv(65536)
                if not data:
                    break
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._dispatch(json.loads(line))
        except (OSError, ValueError):
            pass
        self._process.wait()
        self._fail_all(TemplateUnavailable(self._ended_reason()))

    def _dispatch(self, message: dict[str, Any]) -> None:
        event = message.get("event")
        if event == "exit":
            self._exits[int(message["pid"])] = int(message["status"])
        elif event == "hello":
            self._hello.set_result(message)
        elif event == "ready":
            self.ready_at = time.monotonic()
            self._ready.set_result(message)
            if message.get("context_created"):
                log.error("worker template %d created a TensorFlow context before forking", self.pid)
        elif "id" in message:
            future = self._pending.pop(int(message["id"]), None)
            if future is not None and not future.done():
                future.set_result(message)

    def _ended_reason(self) -> str:
        tail = ""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                lines = [ln.strip() for ln in fh if ln.strip()]
            tail = lines[-1] if lines else ""
        except OSError:
            pass
        code = self._process.poll()
        return f"the worker template (pid {self.pid}) ended (exit status {code})" + (f": {tail}" if tail else "")

    def _fail_all(self, exc: Exception) -> None:
        for future in [self._hello, self._ready, *self._pending.values()]:
            if not future.done():
                future.set_exception(exc)
        self._pending.clear()

    async def request(self, op: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        if not self.alive():
            raise TemplateUnavailable(self._ended_reason())
        request_id = next(self._ids)
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self._pending[request_id] = future
        line = json.dumps({"id": request_id, "op": op, **fields}).encode() + b"\n"
        try:
            with self._send_lock:
                self._channel.sendall(line)
        except OSError as exc:
            self._pending.pop(request_id, None)
            raise TemplateUnavailable(f"the worker template (pid {self.pid}) is not answering: {exc}") from None
        try:
            reply = await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except asyncio.TimeoutError:
            self._pending.pop(request_id, None)
            raise TemplateUnavailable(f"the worker template (pid {self.pid}) did not answer {op!r} "
                                      f"within {timeout:.0f} s") from None
        if "error" in reply:
            raise TemplateUnavailable(f"the worker template could not {op}: {reply['error']}")
        return reply

    # ------------------------------------------------------------------ operations
    async def wait_ready(self, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        """Wait until TensorFlow is imported in the template. Raises :class:`TemplateNamespaceError`
        when it died before entering its namespace, :class:`TemplateUnavailable` otherwise."""
        try:
            await asyncio.wait_for(asyncio.wrap_future(self._hello), timeout)
        except TemplateUnavailable as exc:
            if self.private_network:
                raise TemplateNamespaceError(str(exc)) from None
            raise
        except asyncio.TimeoutError:
            self.close()
            raise TemplateUnavailable(f"the worker template did not start within {timeout:.0f} s") from None
        try:
            return await asyncio.wait_for(asyncio.wrap_future(self._ready), timeout)
        except asyncio.TimeoutError:
            self.close()
            raise TemplateUnavailable(f"the worker template did not import TensorFlow within {timeout:.0f} s") \
                from None

    async def fork(self, env: Mapping[str, str], argv: list[str], log_path: str, cwd: str) -> int:
        """Fork a worker kernel running ipykernel with ``argv``; its pid."""
        reply = await self.request("fork", env=dict(env), argv=argv, log=log_path, cwd=cwd)
        return int(reply["pid"])

    async def reserve_ports(self, count: int) -> list[int]:
        """TCP ports held inside the template's network namespace until :meth:`release_ports`."""
        reply = await self.request("ports", count=count)
        return [int(p) for p in reply["ports"]]

    async def release_ports(self, ports: list[int]) -> None:
        if self.alive():
            try:
                await self.request("release", ports=ports, timeout=5.0)
            except TemplateUnavailable:
                pass

    async def status(self) -> dict[str, Any]:
        return await self.request("status")

    def enter_prefix(self) -> list[str]:
        """Command prefix that starts a program inside this template's network namespace."""
        return namespace_prefix(self.pid, self.user_ns)

    def close(self) -> None:
        """End the template. Its forked workers are not affected (they belong to their clusters)."""
        self._closed = True
        try:
            self._channel.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._channel.close()
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()


class TemplatePool:
    """The templates of this notebook process, one per :func:`startup_key`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._templates: dict[tuple[Any, ...], WorkerTemplate] = {}
        self._directory: str | None = None

    def get(self, python: str, env: Mapping[str, str], private_network: bool) -> WorkerTemplate:
        """The live template for this start-up environment, started now if there is none."""
        if private_network and not (sys.platform.startswith("linux") and shutil.which("unshare")):
            raise TemplateNamespaceError("unshare (util-linux) is not available")
        key = startup_key(python, private_network, env)
        with self._lock:
            template = self._templates.get(key)
            if template is not None and template.alive():
                return template
            if self._directory is None or not os.path.isdir(self._directory):
                self._directory = tempfile.mkdtemp(prefix=f"{RUNTIME_PREFIX}{os.getpid()}-templates-")
            template = WorkerTemplate(key, python, template_env(env), private_network, self._directory)
            self._templates[key] = template
            log.debug("started worker template %d for %s", template.pid, python)
            return template

    def templates(self) -> list[WorkerTemplate]:
        with self._lock:
            return list(self._templates.values())

    def close(self) -> None:
        with self._lock:
            templates, self._templates = list(self._templates.values()), {}
            directory, self._directory = self._directory, None
        for template in templates:
            template.close()
        if directory:
            shutil.rmtree(directory, ignore_errors=True)


pool = TemplatePool()
atexit.register(pool.close)
