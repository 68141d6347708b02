"""The worker template of a remote host (stdlib only): run by the remote agent in its ``template`` role.

Like the local template (``worker_template.py``), it imports TensorFlow (and tf_keras when
``TF_USE_LEGACY_KERAS=1``) and ipykernel once, never initialises TensorFlow's runtime, and forks worker
kernels that start with all of that in memory (frozen out of the garbage collector's sight, so that
they stay shared: ``share_loaded_objects``). Unlike it, it may run where mwnotebook is not installed:
its source travels in the agent's configuration line (``source``) and runs inside the agent process,
so everything here is the standard library, and a forked child becomes exactly what the agent starts
without a template: ``python -m mwnotebook.processes.worker_kernel -f FILE`` where mwnotebook is
importable (with the same worker runtime, installed in the child before the kernel starts), else
``python -m ipykernel_launcher -f FILE`` (the same kernel, run in-process).

Who asks for a fork: a worker's own agent (``remote_agent.py``, ``kernel`` role). It connects to this
template's unix socket (in a private 0700 directory; the peer must be the same user), sends one JSON
line ``{"op": "fork", "env", "argv", "cwd", "log", "owner"}`` and gets ``{"pid": P}``, later
``{"event": "exit", "status": S}`` when the child ended (S as ``Popen.returncode``). The connection
key never travels here: the child reads the agent's 0600 connection file. ``{"op": "status"}`` answers
what the template has loaded and whether a TensorFlow context exists (tests).

The local template imports this module's fork helpers (``fork_child``, ``reset_signals``,
``redirect_output``, ``reaped``, ``loaded_state``), so both kinds of template fork the same way; they
must stay standard library only.

Lifetimes: the template ends when the launcher closes its channel (stdin EOF) or stops pinging it
(a silently dead network). Its children do not die with it: each watches its ``owner`` (the worker's
agent, which kills the child's process group when its own channel closes) and kills its own process
group when the owner is gone, so a killed template costs no running cell and leaves nothing behind.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

try:  # imported as part of the package
    from . import owner_watch
except ImportError:  # run from source: the helper was sent along (processes/shipped/__init__.py bundle)
    import owner_watch  # type: ignore[no-redef]

#: Each template's private directory: DIR_PREFIX + its pid + a random suffix, in the temp dir.
DIR_PREFIX = "mwnotebook-template-"
#: What a kernel imports while it initialises, loaded once here (none of it starts a thread).
KERNEL_MODULES = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.debugger",
                  "IPython.core.completerlib", "tornado.platform.asyncio")
#: mwnotebook's worker kernel and its start-up, loaded here where importable (a forked child then
#: installs them without importing; see :func:`worker_kernel`). Importing them installs nothing.
#: Not ``worker_hooks``: the set-up code tells from its presence whether a kernel has the hooks
#: (engine/workers/bootstrap.py ``HOOKS_CODE``).
WORKER_MODULES = ("mwnotebook.processes.worker_kernel",
                  *(f"mwnotebook.processes.runtime.{name}" for name in (
                      "collective_keys", "containment", "module_walk", "output", "ps_guard", "stack_signal")))
#: Where importable: the template lists the loaded modules once and its children's kernels use that
#: list instead of walking every module over pages shared with the template (see that module).
MODULE_WALK = "mwnotebook.processes.runtime.module_walk"
#: ``0`` in the template's environment leaves its objects unfrozen (to measure the difference:
#: benchmarks/probes/remote_template_freeze.py); anything else, or unset, freezes them.
FREEZE_ENV = "MWNOTEBOOK_TEMPLATE_GC_FREEZE"
#: ``0`` in a worker's environment: its forked child is plain ``ipykernel_launcher`` even where
#: mwnotebook is importable (as remote_agent.py ``WORKER_KERNEL_ENV`` for a fresh kernel).
WORKER_KERNEL_ENV = "MWNOTEBOOK_REMOTE_WORKER_KERNEL"


def remove_stale_dirs() -> None:
    """Remove the directories of this user's templates that were killed before they could."""
    parent = tempfile.gettempdir()
    for name in os.listdir(parent):
        owner = name[len(DIR_PREFIX):].split("-", 1)[0]
        path = os.path.join(parent, name)
        if not name.startswith(DIR_PREFIX) or not owner.isdigit():
            continue
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(owner), 0)  # raises if that template is gone
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def exit_code(status: int) -> int:
    """A wait status as ``Popen.returncode`` (negative: killed by that signal)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else status


def reaped() -> Iterator[tuple[int, int]]:
    """``(pid, exit code)`` of each child that has ended, without waiting."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, exit_code(status)


def fork_child(become: Callable[[], None]) -> int:
    """Fork; the child runs ``become`` and leaves with its exit code, never returning here."""
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            become()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    return pid


def reset_signals() -> None:
    """In a forked child: the signal handling of a freshly started process (Ctrl-C as KeyboardInterrupt)."""
    signal.set_wakeup_fd(-1)
    # (Not SIGPIPE: Python ignores it from the start, so that a closed pipe is an exception.)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def redirect_output(log_path: str) -> None:
    """stdin from /dev/null, stdout and stderr appended to ``log_path`` (0600)."""
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.close(null_fd)


def loaded_state() -> dict[str, Any]:
    """Modules loaded and whether TensorFlow's eager context exists (reading it creates nothing)."""
    context = sys.modules.get("tensorflow.python.eager.context")
    created = getattr(context, "_context", None) if context is not None else None
    return {
        "tensorflow_imported": "tensorflow" in sys.modules,
        "tf_keras_imported": "tf_keras" in sys.modules,
        "context_created": created is not None,
        "context_initialized": bool(created is not None and getattr(created, "_initialized", False)),
        "threads": len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None,
        "frozen_objects": gc.get_freeze_count(),
        "pid": os.getpid(),
    }


def preload(names: list[str]) -> str:
    """Import TensorFlow (and the rest of ``names``), the kernel's modules and, where importable, mwnotebook's
    worker kernel; '' or what failed."""
    problems = []
    for name in names:
        if name == "tf_keras" and os.environ.get("TF_USE_LEGACY_KERAS") != "1":
            continue
        try:
            __import__(name)
        except Exception as exc:
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
    for name in KERNEL_MODULES:
        try:
            __import__(name)
        except Exception:
            if name == "ipykernel.kernelapp":
                raise
    for name in WORKER_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            break  # mwnotebook is not importable here: the children run plain ipykernel
    return "; ".join(problems)


def share_loaded_objects() -> bool:
    """Move everything loaded so far out of the garbage collector's sight (``gc.freeze``); True if done.

    For the reason the local template does it (``worker_template.share_loaded_objects``): a
    collection writes into the header of every object it scans, so a forked kernel's first full
    collection would copy every page holding the template's TensorFlow, Keras and IPython objects,
    and each full collection would scan them all again. Frozen, they stay shared between the
    template and its children and are never scanned (they live as long as the process anyway). No
    collection first, for the same reason as there (it cost the wait for a ready template and freed
    next to nothing).
    """
    if os.environ.get(FREEZE_ENV) == "0":
        return False
    gc.freeze()
    return True


class Template:
    """The fork server: the launcher's channel (stdin, for EOF and pings) and a unix socket."""

    def __init__(self, send: Callable[..., None], silence_limit: float) -> None:
        self.send = send
        self.silence_limit = silence_limit
        remove_stale_dirs()
        self.dir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")  # mode 0700
        self.path = os.path.join(self.dir, "fork.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(64)
        self.clients: dict[int, list[Any]] = {}  # fd -> [socket, buffer]
        #: pid -> socket of the agent that asked (None once it went away)
        self.children: dict[int, socket.socket | None] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stdin = b""

    def serve(self) -> None:
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the poll below
        poller = select.poll()
        for fd in (0, self.listener.fileno(), self._wake_r):
            poller.register(fd, select.POLLIN)
        last_heard = time.monotonic()
        while True:
            events = poller.poll(1000)
            self._reap()
            for fd, _ in events:
                if fd == 0:
                    data = os.read(0, 4096)
                    if not data:
                        return  # the launcher closed the channel, or the connection dropped
                    last_heard = time.monotonic()
                elif fd == self._wake_r:
                    os.read(self._wake_r, 512)
                elif fd == self.listener.fileno():
                    self._accept(poller)
                elif fd in self.clients:
                    self._read_client(fd, poller)
            if self.silence_limit and time.monotonic() - last_heard > self.silence_limit:
                sys.stderr.write(f"mwnotebook template: no word from the notebook for {self.silence_limit:g} s\n")
                return

    def _accept(self, poller: select.poll) -> None:
        conn, _ = self.listener.accept()
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", creds)[1] != os.geteuid():
            conn.close()  # only this user's agents (the directory is 0700 too)
            return
        self.clients[conn.fileno()] = [conn, b""]
        poller.register(conn.fileno(), select.POLLIN)

    def _drop(self, fd: int, poller: select.poll) -> None:
        conn = self.clients.pop(fd)[0]
        poller.unregister(fd)
        for pid, owner in self.children.items():
            if owner is conn:
                self.children[pid] = None
        conn.close()

    def _read_client(self, fd: int, poller: select.poll) -> None:
        entry = self.clients[fd]
        try:
            data = entry[0].recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(fd, poller)
            return
        entry[1] += data
        while b"\n" in entry[1]:
            line, entry[1] = entry[1].split(b"\n", 1)
            reply = self._handle(json.loads(line), entry[0])
            try:
                entry[0].sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                pass

    def _handle(self, request: dict[str, Any], conn: socket.socket) -> dict[str, Any]:
        op = request.get("op")
        try:
            if op == "fork":
                pid = self._fork(request)
                self.children[pid] = conn
                return {"pid": pid}
            if op == "status":
                return loaded_state()
            return {"error": f"unknown request {op!r}"}
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _reap(self) -> None:
        for pid, code in reaped() if self.children else ():
            conn = self.children.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(json.dumps({"event": "exit", "status": code}).encode() + b"\n")
                except OSError:
                    pass

    def close(self) -> None:
        for conn, _ in self.clients.values():
            conn.close()
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ fork
    def _fork(self, request: dict[str, Any]) -> int:
        return fork_child(lambda: self._become_kernel(request))

    def _become_kernel(self, request: dict[str, Any]) -> None:
        """In the child: shed the template, take the worker's environment, run ipykernel."""
        os.setsid()  # its own process group, as the agent's Popen(start_new_session=True) gives
        reset_signals()
        for conn, _ in self.clients.values():
            conn.close()
        self.listener.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        redirect_output(request["log"])  # also closes the SSH channel's stdin/stdout/stderr here
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        cwd = request.get("cwd")
        if cwd and os.path.isdir(cwd):
            os.chdir(cwd)
        follow_pythonpath(os.environ)
        numpy = sys.modules.get("numpy")
        if numpy is not None:  # siblings would share the template's numpy random state
            numpy.random.seed()
        argv = [str(a) for a in request["argv"]]
        serve = worker_kernel(argv)  # first: it may fork a watchdog, which needs a single thread
        # End this kernel (its whole process group) when the agent that asked for it is gone.
        owner_watch.watch_process(int(request["owner"]), _kill_own_group)
        serve()


def follow_pythonpath(environ: Any) -> None:
    """Put ``PYTHONPATH``'s entries first on ``sys.path``, as a fresh interpreter started with this
    environment would have them (what is imported already stays as the template loaded it)."""
    entries = [e for e in environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    for entry in reversed(entries):
        entry = os.path.abspath(entry)
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)


def worker_kernel(argv: list[str]) -> Callable[[], None]:
    """In a forked child: what the agent starts fresh, as a call. Where mwnotebook is importable, its
    worker kernel, whose worker runtime (processes/worker_runtime.py) is installed here and now,
    before the kernel's threads and sockets exist; elsewhere plain ``ipykernel_launcher``."""
    try:  # by name: optional, resolved on the host (this file must run where mwnotebook is absent)
        if os.environ.get(WORKER_KERNEL_ENV) == "0":
            raise ImportError(f"{WORKER_KERNEL_ENV}=0")
        kernel_module = importlib.import_module("mwnotebook.processes.worker_kernel")
        worker_runtime = importlib.import_module("mwnotebook.processes.worker_runtime")
    except ImportError:
        sys.argv = ["ipykernel_launcher", *argv]
        from ipykernel import kernelapp

        return lambda: kernelapp.launch_new_instance(argv)
    sys.argv = [str(kernel_module.__file__), *argv]
    worker_runtime.install(argv)
    if MODULE_WALK in sys.modules:
        sys.modules[MODULE_WALK].install()
    return lambda: kernel_module.serve(argv)


def _end_now(template: Template) -> None:
    template.close()
    os._exit(0)


def _kill_own_group() -> None:
    os.killpg(0, signal.SIGKILL)


def run(config: dict[str, Any], send: Callable[..., None], silence_limit: float) -> int:
    """The template role: load, report ``ready`` (with the socket's path), serve until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are for kernels
    # What TensorFlow reads while it loads must be set before it loads (the launcher keeps one
    # template per distinct set); what differs per worker is set in each child.
    os.environ.update({str(k): str(v) for k, v in config.get("env", {}).items()})
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]  # as ipykernel_launcher does while it loads; the kernel puts it back
    follow_pythonpath(os.environ)
    template = Template(send, silence_limit)
    try:
        # Loading takes seconds (TensorFlow), and nothing reads stdin meanwhile: a launcher that
        # closes the channel then (a failed start, the notebook gone) must not leave it importing.
        loaded = owner_watch.exit_on_hangup(0, lambda: _end_now(template))
        try:
            problem = preload(list(config.get("preload", [])))
            if MODULE_WALK in sys.modules:
                sys.modules[MODULE_WALK].remember()  # before the freeze, as the local template does
            share_loaded_objects()
        finally:
            loaded()
        send("ready", socket=template.path, problem=problem, python=sys.executable, **loaded_state())
        template.serve()
    finally:
        template.close()
    return 0
