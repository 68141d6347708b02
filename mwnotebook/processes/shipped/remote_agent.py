"""The small agent that ``SSHLauncher`` runs on a remote host (stdlib only, Python >= 3.7).

It is never installed on the remote host: the launcher sends this file's source over the SSH
channel's stdin and the remote interpreter executes it (see ``BOOTSTRAP``). Its configuration,
including the kernel's HMAC signing key, follows on stdin as one JSON line, so the key never
appears on a command line or in a process list. Three roles:

``ports``
    Preflight (Python version, required modules present) and reservation of TCP ports for
    TensorFlow's gRPC servers on this host. Each port stays bound (``SO_REUSEPORT``, never
    listening) until stdin closes, so nothing else on the host takes it while TensorFlow, which
    also sets ``SO_REUSEPORT``, can still bind it. Replies with the ports and the address this
    host was reached at (the server side of ``SSH_CONNECTION``).
``kernel``
    Writes a 0600 connection file (ports 0, loopback only) in a private 0700 directory, starts
    ``python -m ipykernel_launcher -f FILE`` with the worker's environment (``python -m
    mwnotebook.processes.worker_kernel -f FILE`` where that interpreter can import mwnotebook: the
    same kernel as a local worker, with the worker runtime of processes/worker_runtime.py), waits until the kernel
    has bound its sockets and rewritten the file with the real ports, and reports them. Then it
    obeys ``interrupt`` / ``stacks`` / ``usage`` / ``kill`` lines on stdin (``stacks``: the kernel's Python
    stacks, read back with stack_dump.py, as a ``stacks`` event; ``usage``: its CPU share and resident
    memory from /proc, as a ``usage`` event). Starting and watching the kernel:
    remote_kernel.py. When stdin closes (the notebook stopped the
    worker, or the SSH connection dropped) or the agent is terminated, the kernel's whole process
    group is killed and the directory removed. The kernel also gets ``PR_SET_PDEATHSIG`` so that
    it dies with the agent even if the agent is SIGKILLed.

    With ``template`` (the path of this host's template socket), the kernel is forked from the
    template instead (TensorFlow already imported), as the same kernel (see remote_template.py); it
    kills its own process group when this agent is gone. If the template can't fork, the kernel
    starts fresh and ``ready`` carries a one-line ``note`` saying why.
``template``
    The host's worker template: the source of ``remote_template.py`` comes in the configuration
    (``source``) and runs here; it imports TensorFlow once and forks kernels on request until
    stdin closes. Replies ``ready`` with its socket's path.

Every message to the launcher is one JSON line on stdout: ``{"event": ...}``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

try:  # imported as part of the package
    from . import proc_usage, remote_kernel, stack_dump
except ImportError:  # run from source: the helpers were sent along (processes/shipped/__init__.py bundle)
    import proc_usage  # type: ignore[no-redef]
    import remote_kernel  # type: ignore[no-redef]
    import stack_dump  # type: ignore[no-redef]

# What other modules and tests know the agent by (kernel start-up itself: remote_kernel.py).
WORKER_KERNEL = remote_kernel.WORKER_KERNEL
WORKER_KERNEL_ENV = remote_kernel.WORKER_KERNEL_ENV
has_worker_kernel = remote_kernel.has_worker_kernel
Kernel = remote_kernel.Kernel
describe = remote_kernel.describe

#: What the launcher runs on the remote host, after ``exec PYTHON -u -c``: read a length line,
#: then that many characters of agent source, and run it as ``__main__``.
BOOTSTRAP = (
    "import sys;n=int(sys.stdin.readline());"
    "exec(compile(sys.stdin.read(n),'<mwnotebook-remote-agent>','exec'),"
    "{'__name__':'__main__'})"
)


_lock = threading.Lock()
#: When the launcher last wrote a line (monotonic seconds); see read_line().
_last_heard = [time.monotonic()]
#: The silence limit of the first ``ping`` (0: none yet); the watchdog thread ends when _quiet is set.
_silence_limit = [0.0]
_quiet = threading.Event()
_watchdogs: list[threading.Thread] = []


def read_line() -> str:
    """The next line from the launcher other than ``ping`` ('' at EOF).

    ``ping LIMIT`` (the first one) arms a watchdog: if no line at all arrives for LIMIT seconds,
    the connection died silently (no FIN, no RST: sshd may not notice for hours), and the agent
    ends itself with SIGTERM, which kills the kernel (its handler) or releases the ports.
    """
    while True:
        line = sys.stdin.readline()
        _last_heard[0] = time.monotonic()
        if not line.startswith("ping"):
            return line
        limit = line.split()[1:]
        if limit and not _watchdogs:
            _silence_limit[0] = float(limit[0])
            _watchdogs.append(threading.Thread(target=_watchdog, args=(float(limit[0]),), daemon=True))
            _watchdogs[0].start()


def stop_watchdog() -> None:
    """End the watchdog thread (a template forks: it keeps no threads, and watches the silence itself)."""
    _quiet.set()
    for thread in _watchdogs:
        thread.join()


def _watchdog(limit: float) -> None:
    while time.monotonic() - _last_heard[0] <= limit:
        if _quiet.wait(min(1.0, limit / 4)):
            return
    sys.stderr.write(f"mwnotebook agent: no word from the notebook for {limit:g} s; stopping\n")
    os.kill(os.getpid(), signal.SIGTERM)


def send(event: str, **fields: object) -> None:
    """One JSON line to the launcher; a closed channel is not an error (we are shutting down)."""
    fields["event"] = event
    try:
        with _lock:
            sys.stdout.write(json.dumps(fields) + "\n")
            sys.stdout.flush()
    except (OSError, ValueError):
        pass


def missing_modules(names: list[str]) -> list[str]:
    """Modules from ``names`` that this interpreter cannot import (checked without importing)."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def preflight(config: dict[str, Any]) -> bool:
    missing = missing_modules(list(config.get("require", [])))
    if missing:
        send("error", kind="missing", modules=missing, python=sys.executable,
             version=sys.version.split()[0])
        return False
    return True


def server_address() -> str:
    """The address the SSH client reached this host at (``SSH_CONNECTION``'s third field)."""
    parts = os.environ.get("SSH_CONNECTION", "").split()
    return parts[2] if len(parts) >= 3 else socket.gethostname()


def reserve_ports(count: int) -> list[socket.socket]:
    held = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("0.0.0.0", 0))
        held.append(sock)
    return held


def run_ports(config: dict[str, Any]) -> int:
    if not preflight(config):
        return 3
    held = reserve_ports(int(config["count"]))
    send("ports", ports=[s.getsockname()[1] for s in held], address=server_address(),
         python=sys.executable, version=sys.version.split()[0])
    while read_line():  # hold the ports until the launcher closes the channel
        pass
    for sock in held:
        sock.close()
    return 0


def _command_loop(kernel: Kernel) -> None:
    """Obey the launcher's commands; stdin EOF (stop, or a dropped connection) kills the kernel."""
    while True:
        line = read_line()
        if not line:
            break
        command = line.strip()
        if command == "interrupt":
            kernel.signal(signal.SIGINT)
        elif command == "stacks":  # in its own thread: an interrupt meanwhile is not held up
            threading.Thread(target=_send_stacks, args=(kernel,), daemon=True).start()
        elif command == "usage":
            _send_usage(kernel)
        elif command == "kill":
            break
    kernel.kill()


def _send_usage(kernel: Kernel) -> None:
    """The kernel's CPU seconds so far and its age in seconds (both from /proc: the notebook side turns
    two readings into a CPU share, each reader over its own interval: engine/usage.py), resident memory
    and memory limit, as one ``usage`` event (``note`` says why not, when they cannot be read)."""
    pid = kernel.proc.pid
    try:
        cpu, resident, age = proc_usage.proc_usage(pid)
    except (OSError, ValueError, IndexError) as exc:
        send("usage", pid=pid, cpu_seconds=None, age=None, memory_bytes=None, memory_limit=None,
             note=f"cannot read /proc/{pid}: {exc}")
        return
    send("usage", pid=pid, cpu_seconds=cpu, age=age, memory_bytes=resident,
         memory_limit=proc_usage.memory_limit(pid, environ=os.environ), note="")


def _send_stacks(kernel: Kernel) -> None:
    """The kernel's stacks (stack_dump.py), as one ``stacks`` event."""
    if kernel.proc.poll() is not None:
        text, main, note = "", None, "the worker process has ended"
    else:
        text, main, note = stack_dump.take(kernel.proc.pid, kernel.connection_file + stack_dump.SUFFIX)
    send("stacks", text=text, main=main, note=note)


def run_kernel(config: dict[str, Any]) -> int:
    if not preflight(config):
        return 3
    kernel = Kernel(config)

    def on_signal(signum: int, frame: object) -> None:
        kernel.kill()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    # Read commands (and pings) from now on, also while the kernel starts.
    threading.Thread(target=_command_loop, args=(kernel,), daemon=True).start()
    try:
        ports = kernel.wait_ports(float(config.get("timeout", 60)))
        if ports is None:
            rc = kernel.proc.poll()
            kernel.kill()
            kernel.proc.wait()
            why = describe(rc) if rc is not None else "did not bind its ports in time"
            send("error", kind="kernel", detail=f"the kernel {why}", log=remote_kernel.tail(kernel.log_path))
            return 4
        send("ready", pid=kernel.proc.pid, ports=ports, python=sys.executable, dir=kernel.dir,
             forked=isinstance(kernel.proc, remote_kernel.ForkedProcess), note=kernel.template_note)
        rc = kernel.proc.wait()
        send("exit", returncode=rc, description=describe(rc),
             log="" if kernel.killed else remote_kernel.tail(kernel.log_path))
        return 0
    finally:
        kernel.cleanup()


def run_template(config: dict[str, Any]) -> int:
    """This host's worker template (``remote_template.py``, whose source is in ``config``)."""
    if not preflight(config):
        return 3
    stop_watchdog()  # the template forks: no thread of ours may run; it watches the silence itself
    namespace: dict[str, Any] = {"__name__": "mwnotebook_remote_template"}
    exec(compile(config.pop("source"), "<mwnotebook-remote-template>", "exec"), namespace)
    return int(namespace["run"](config, send, _silence_limit[0]))


def main() -> int:
    line = read_line()
    if not line:
        return 2
    config = json.loads(line)
    role = config.get("role")
    if role == "ports":
        return run_ports(config)
    if role == "kernel":
        return run_kernel(config)
    if role == "template":
        return run_template(config)
    send("error", kind="protocol", detail=f"unknown role {role!r}")
    return 2


if __name__ == "__main__":
    code = main()
    try:
        sys.stdout.flush()
    finally:
        # os._exit, not sys.exit: a daemon thread may be blocked reading stdin, and interpreter
        # shutdown can abort on the stdin buffer lock that thread holds.
        os._exit(code)
