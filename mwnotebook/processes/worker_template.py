"""A worker template: ``python -m mwnotebook.processes.worker_template --channel FD --parent PID [--netns]``.

Every worker kernel spends 2-2.7 s of CPU importing TensorFlow. This process pays that once: it
imports TensorFlow (and tf_keras when ``TF_USE_LEGACY_KERAS=1``) and ipykernel, and then forks
worker kernels on request, each of which starts with all of that already in memory (shared
copy-on-write with the template and its siblings).

Why forking is safe here, and what the template must never do:

- It never initialises the TensorFlow runtime: no op, no device query, no eager context. A runtime
  with threads, a gRPC server or a CUDA context cannot be forked, and any op before
  ``MultiWorkerMirroredStrategy`` would also freeze the collectives ("Collective ops must be
  configured at program startup"). ``status`` reports ``context_initialized`` so tests can check.
- Variables TensorFlow reads while it loads (``TF_CPP_MIN_LOG_LEVEL``, ``TF_USE_LEGACY_KERAS``,
  ``TF_XLA_FLAGS``, ...) are in this process's environment from the start; the launcher keeps one
  template per distinct set of them. Per-worker variables (``TF_CONFIG``, ``CUDA_VISIBLE_DEVICES``)
  are set in the child after the fork, before the cell can initialise anything.
- GPUs: CUDA is initialised when TensorFlow first lists devices (context creation), never at
  import, so the child's ``CUDA_VISIBLE_DEVICES`` is the one the driver sees. A process that has
  initialised CUDA cannot be forked usefully; this template never does (no GPU on the test machine:
  reasoned, not measured).

The channel is one end of a socketpair the launcher created (no path on disk, so nothing else can
connect); the connection key never travels on it: a fork request names the 0600 connection file.
Messages are JSON lines. Requests carry an ``id`` and get one reply with the same ``id``; the
template also sends ``{"event": "exit", "pid": P, "status": S}`` when one of its children ends.

Lifetime: the template ends when the launcher closes the channel or the notebook process dies
(a pidfd of the notebook, polled with the channel; no helper thread, so forking stays single-threaded
as far as Python is concerned). Forked workers do not die with the template: they watch the
notebook's pidfd themselves, so a killed template costs no running cell, and they still end with
the notebook.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import gc
import importlib.util
import json
import os
import select
import signal
import socket
import sys
from typing import Any

from mwnotebook.processes.shipped import owner_watch
from mwnotebook.processes.shipped.remote_template import (
    fork_child,
    loaded_state,
    reaped,
    redirect_output,
    reset_signals,
)

PARENT_POLL_SECONDS = 0.5


class Template:
    def __init__(self, channel: socket.socket, parent_pid: int) -> None:
        self.channel = channel
        self.parent_pid = parent_pid
        self.parent_fd = _pidfd(parent_pid)
        self.children: set[int] = set()
        self.held_ports: dict[int, socket.socket] = {}
        self._buffer = b""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    # ------------------------------------------------------------------ channel
    def send(self, **message: Any) -> None:
        self.channel.sendall(json.dumps(message).encode() + b"\n")

    def serve(self) -> None:
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the poll below
        poller = select.poll()
        poller.register(self.channel, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        if self.parent_fd is not None:
            poller.register(self.parent_fd, select.POLLIN)
        while True:
            events = poller.poll(PARENT_POLL_SECONDS * 1000)
            self._reap()
            if self.parent_gone():
                return
            for fd, _ in events:
                if fd == self._wake_r:
                    os.read(self._wake_r, 512)
                elif fd == self.channel.fileno():
                    data = self.channel.recv(65536)
                    if not data:
                        return  # the launcher closed the channel (or died)
                    self._buffer += data
                    while b"\n" in self._buffer:
                        line, self._buffer = self._buffer.split(b"\n", 1)
                        self._handle(json.loads(line))

    def parent_gone(self) -> bool:
        if os.getppid() != self.parent_pid:
            return True
        if self.parent_fd is not None:
            return bool(select.select([self.parent_fd], [], [], 0)[0])
        return False

    def _reap(self) -> None:
        for pid, code in reaped() if self.children else ():
            self.children.discard(pid)
            self.send(event="exit", pid=pid, status=code)

    def _handle(self, request: dict[str, Any]) -> None:
        op = request.get("op")
        reply: dict[str, Any] = {"id": request.get("id")}
        try:
            if op == "fork":
                reply["pid"] = self._fork(request)
            elif op == "ports":
                reply["ports"] = self._reserve(int(request["count"]))
            elif op == "release":
                for port in request["ports"]:
                    sock = self.held_ports.pop(int(port), None)
                    if sock is not None:
                        sock.close()
            elif op == "status":
                reply.update(status())
            else:
                reply["error"] = f"unknown request {op!r}"
        except Exception as exc:
            reply["error"] = f"{type(exc).__name__}: {exc}"
        self.send(**reply)

    def _reserve(self, count: int) -> list[int]:
        from mwnotebook.config.tf_config import PortReservation

        reservation = PortReservation.reserve(count)
        for port, sock in zip(reservation.ports, reservation.sockets):
            self.held_ports[port] = sock
        return reservation.ports

    # ------------------------------------------------------------------ fork
    def _fork(self, request: dict[str, Any]) -> int:
        pid = fork_child(lambda: self._become_worker(request))
        self.children.add(pid)
        return pid

    def _become_worker(self, request: dict[str, Any]) -> None:
        """In the child: shed the template, take the worker's environment, run the kernel."""
        os.setsid()  # its own session and process group, like a launched kernel (killpg takes all of it)
        reset_signals()
        for fd in (self.channel.fileno(), self._wake_r, self._wake_w):
            os.close(fd)
        for sock in self.held_ports.values():
            sock.close()
        redirect_output(request["log"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop("MWNOTEBOOK_PARENT_PID", None)  # as an exec'd worker_kernel does
        cwd = request.get("cwd") or os.getcwd()
        if sys.path and sys.path[0] == os.getcwd():
            sys.path[0] = cwd  # what `python -m` would have put first, had the worker started here
        os.chdir(cwd)
        _reseed_random()
        from mwnotebook.processes import worker_kernel, worker_runtime
        from mwnotebook.processes.runtime import module_walk

        argv = [str(a) for a in request["argv"]]
        # What an exec'd worker does first, while it has one thread: contain its children, fresh
        # collective keys per strategy, complete output, stack dumps on request.
        worker_runtime.install(argv)
        module_walk.install()  # the kernel takes the template's list of module files: no walk over shared pages
        _die_with_notebook(self.parent_pid, self.parent_fd)
        _show_as_worker(os.getppid())
        sys.argv = [worker_kernel.__file__, *argv]
        worker_kernel.serve(argv)
        # what interpreter exit would do; the caller then leaves with os._exit (atexit has no public call)
        atexit._run_exitfuncs()  # noqa: SLF001


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _reseed_random() -> None:
    """Forked siblings share the template's random state; numpy's global one is not reseeded by
    fork (Python's ``random`` is), and exec'd workers each had their own."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _exit_now() -> None:
    os._exit(1)


def _die_with_notebook(notebook_pid: int, notebook_fd: int | None) -> None:
    """End this worker when the notebook ends, whether or not the template is still there."""
    if notebook_fd is None:  # no pidfd (kernel < 5.3): die with the template, which dies with the notebook
        owner_watch.die_with_parent()
    # the template's pidfd of the notebook, inherited over the fork (none: the template could not open one)
    owner_watch.watch_process(notebook_pid, _exit_now, pidfd=notebook_fd, open_one=False,
                              name="mwnotebook-parent-watch")


def _show_as_worker(template_pid: int) -> None:
    """Rewrite this process's command line (``ps``, /proc/PID/cmdline) to name the worker kernel.

    The argument area is this process's own memory; the template's command line is long enough.
    """
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])
        with open("/proc/self/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0", 1)[0]
        tail = b"\0".join([b"-m", b"mwnotebook.processes.worker_kernel", b"--forked-from",
                           str(template_pid).encode()]) + b"\0"
        room = end - start - len(argv0) - 1
        if room < len(tail):
            return
        ctypes.memmove(start + len(argv0) + 1, tail + b"\0" * (room - len(tail)), room)
    except (OSError, ValueError, IndexError):
        pass


def status() -> dict[str, Any]:
    """What the template has loaded and whether it has (wrongly) started TensorFlow's runtime.

    ``context._context`` stays None until something creates the eager context (any op, device
    listing, ``tf.executing_eagerly()``...); reading it initialises nothing.
    """
    return dict(loaded_state())  # the same check as a remote host's template


def preload() -> str:
    """Import what every worker would import; '' or the reason TensorFlow could not be imported."""
    from mwnotebook.processes.worker_kernel import script_level_tensorflow_logs

    script_level_tensorflow_logs()
    problem = ""
    try:
        import tensorflow  # noqa: F401

        if os.environ.get("TF_USE_LEGACY_KERAS") == "1" and importlib.util.find_spec("tf_keras"):
            import tf_keras  # noqa: F401
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}"
    import ipykernel.ipkernel
    import ipykernel.kernelapp  # noqa: F401

    # What a kernel imports while it initialises (measured: 0.42 -> 0.15 s of CPU per forked worker,
    # most of it debugpy's vendored pydevd, which ipykernel's debugger loads), and what the forked
    # child imports before its kernel runs: shared by all workers instead of one copy each. None
    # starts a thread or runs anything at import.
    for name in ("ipykernel.debugger", "IPython.core.completerlib", "tornado.platform.asyncio",
                 "mwnotebook.worker._lifetime", *WORKER_START_MODULES):
        try:
            importlib.import_module(name)
        except Exception:
            pass
    if not problem and "tf_keras" in sys.modules:
        _resolve_tf_keras()
    return problem


#: Imported by a forked worker between the fork and its first cell (processes/worker_runtime.py,
#: worker_hooks.py and what they install).
WORKER_START_MODULES = (
    "mwnotebook.processes.worker_kernel", "mwnotebook.processes.worker_runtime",
    "mwnotebook.processes.worker_hooks", "mwnotebook.processes.runtime.collective_keys",
    "mwnotebook.processes.runtime.containment", "mwnotebook.processes.runtime.keras_global_logs",
    "mwnotebook.processes.runtime.output", "mwnotebook.processes.runtime.ps_guard",
    "mwnotebook.processes.runtime.reply", "mwnotebook.processes.runtime.stack_signal",
    "mwnotebook.processes.runtime.module_walk", "mwnotebook.config.tf_config",
)

#: Loaded the first time a cell reaches them (``tf.keras.*`` resolves TensorFlow's lazy loader to
#: tf_keras' API modules, ~75 of them; a layer's base class; ``Dataset.shard``): measured in a
#: worker after the seed cell, 2 MiB and 0.02 s of imports that each worker did for itself.
TF_KERAS_FIRST_USE_MODULES = (
    "tf_keras.src.engine.base_layer_v1", "tensorflow.python.data.ops.shard_op",
    "multiprocessing.queues", "multiprocessing.synchronize",
)


def _resolve_tf_keras() -> None:
    """Resolve ``tf.keras`` (an import only: TensorFlow's lazy loader imports tf_keras' API package
    when ``TF_USE_LEGACY_KERAS=1``; no op, no context) and the modules its first use imports."""
    try:
        import tensorflow

        tensorflow.keras.__name__  # noqa: B018  (the attribute access is the import)
        for name in TF_KERAS_FIRST_USE_MODULES:
            importlib.import_module(name)
    except Exception:
        pass


def share_loaded_objects() -> None:
    """Move everything loaded so far out of the garbage collector's sight (``gc.freeze``).

    A collection writes into the header of every object it scans, so a forked worker's first full
    collection copied every page of the template's ~360,000 objects (TensorFlow, Keras, IPython), and
    each full collection took 0.2-0.4 s of scanning them (``benchmarks/probes/noop_breakdown.py``). Frozen,
    they stay shared between the template and its children and are never scanned; what a worker
    creates itself is collected as usual. (They are module-level objects that live as long as the
    process anyway.)

    No collection first: after ``import tensorflow, tf_keras, ipykernel`` one full collection scans
    ~354,000 objects in 0.37-0.45 s and finds 3 to free, and it ran while a first cell waited for
    the template to be ready.
    """
    gc.freeze()


def main() -> None:
    parser = argparse.ArgumentParser(description="mwnotebook worker template (started by the launcher)")
    parser.add_argument("--channel", type=int, required=True, help="fd of the launcher's socketpair end")
    parser.add_argument("--parent", type=int, required=True, help="pid of the notebook process")
    parser.add_argument("--netns", action="store_true", help="bring lo up: we are in a fresh network namespace")
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are for kernels
    channel = socket.socket(fileno=args.channel)
    template = Template(channel, args.parent)
    if template.parent_gone():
        return
    if args.netns:
        from mwnotebook.processes.netns_holder import bring_loopback_up

        bring_loopback_up()
    template.send(event="hello", pid=os.getpid())
    problem = preload()
    from mwnotebook.processes.runtime import module_walk

    module_walk.remember()
    share_loaded_objects()
    template.send(event="ready", problem=problem, **status())
    template.serve()


if __name__ == "__main__":
    main()
