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
    obeys ``interrupt`` / ``kill`` lines on stdin. When stdin closes (the notebook stopped the
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
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

try:  # imported as part of the package
    from . import owner_watch
except ImportError:  # run from source: the helper was sent along (processes/shipped/__init__.py bundle)
    import owner_watch  # type: ignore[no-redef]

#: What the launcher runs on the remote host, after ``exec PYTHON -u -c``: read a length line,
#: then that many characters of agent source, and run it as ``__main__``.
BOOTSTRAP = (
    "import sys;n=int(sys.stdin.readline());"
    "exec(compile(sys.stdin.read(n),'<mwnotebook-remote-agent>','exec'),"
    "{'__name__':'__main__'})"
)

#: mwnotebook's worker kernel (ipykernel plus the worker runtime: processes/worker_kernel.py), run
#: instead of ``ipykernel_launcher`` on a host where the kernel's interpreter can import it.
WORKER_KERNEL = "mwnotebook.processes.worker_kernel"
#: ``0`` in the worker's environment starts plain ``ipykernel_launcher`` anyway (to measure the
#: difference: benchmarks/remote_worker_kernel.py); remote_template.py reads the same name.
WORKER_KERNEL_ENV = "MWNOTEBOOK_REMOTE_WORKER_KERNEL"

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


def has_worker_kernel(env: dict[str, str], cwd: str | None) -> bool:
    """True if the kernel's interpreter, with the kernel's environment (its ``PYTHONPATH``) and
    directory, finds mwnotebook's worker kernel module. Asked of a short-lived interpreter, not of
    this agent: only the kernel's own ``sys.path`` says what ``python -m`` will run (an editable
    install may be a path entry or an import hook), and this agent imports nothing of mwnotebook."""
    if env.get(WORKER_KERNEL_ENV) == "0":
        return False
    probe = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({WORKER_KERNEL!r}) else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env, cwd=cwd, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


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


def _read_ports(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None  # not there yet, or caught mid-write
    names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    ports = {name: int(info.get(name) or 0) for name in names}
    return ports if all(ports.values()) else None


def _tail(path: str, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class ForkedProcess:
    """A kernel forked by this host's worker template, with the ``Popen`` methods ``Kernel`` uses.

    The template is its parent and reaps it; its exit status comes on the request's connection.
    """

    def __init__(self, channel: socket.socket, pid: int) -> None:
        self.channel = channel
        self.pid = pid
        self.returncode = None  # type: int | None
        self.template_gone = False
        self.killed = False
        self._buffer = b""

    @classmethod
    def request(cls, path: str, request: dict[str, Any]) -> ForkedProcess:
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            channel.settimeout(30)
            channel.connect(path)
            channel.sendall(json.dumps(request).encode() + b"\n")
            reply = cls._read_message(channel, b"")[0]
        except BaseException:
            channel.close()
            raise
        if reply is None or "pid" not in reply:
            channel.close()
            raise RuntimeError(str((reply or {}).get("error", "the template closed the connection")))
        return cls(channel, int(reply["pid"]))

    @staticmethod
    def _read_message(channel: socket.socket, buffer: bytes) -> tuple[Any, bytes]:
        while b"\n" not in buffer:
            data = channel.recv(4096)
            if not data:
                return None, buffer
            buffer += data
        line, buffer = buffer.split(b"\n", 1)
        return json.loads(line), buffer

    def _gone(self) -> bool:
        """Without the template's word: has the kernel ended (gone, or a zombie nobody reaps)?"""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except (OSError, IndexError):
            return True

    def _listen(self, timeout: float) -> None:
        """Take the template's word for up to ``timeout`` s; sets ``returncode`` when the kernel ended."""
        if b"\n" not in self._buffer and select.select([self.channel], [], [], timeout)[0]:
            try:
                data = self.channel.recv(4096)
            except OSError:
                data = b""
            if not data:
                self.template_gone = True
            self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if message.get("event") == "exit":
                self.returncode = int(message["status"])

    def poll(self) -> int | None:
        if self.returncode is None:
            if not self.template_gone:
                self._listen(0)
            elif self._gone():  # its status died with the template
                self.returncode = -signal.SIGKILL if self.killed else 1
        return self.returncode

    def wait(self) -> int:
        code = self.poll()
        while code is None:
            if self.template_gone:
                time.sleep(0.1)
            else:
                self._listen(0.5)
            code = self.poll()
        return code


class Kernel:
    """The kernel child process and its private directory."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.dir = tempfile.mkdtemp(prefix="mwnotebook-remote-")  # mode 0700
        self.connection_file = os.path.join(self.dir, "kernel.json")
        self.log_path = os.path.join(self.dir, "kernel.log")
        info = {
            # Loopback unless the launcher reaches the kernel directly (Slurm: the node's address).
            "ip": config.get("ip") or "127.0.0.1", "transport": "tcp", "key": config["key"],
            "signature_scheme": config.get("signature_scheme", "hmac-sha256"),
            "kernel_name": "", "shell_port": 0, "iopub_port": 0, "stdin_port": 0,
            "control_port": 0, "hb_port": 0,
        }
        fd = os.open(self.connection_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in config.get("env", {}).items()})
        env["JPY_PARENT_PID"] = str(os.getpid())
        cwd = config.get("cwd") or None
        if cwd and not os.path.isdir(cwd):
            cwd = None
        #: Why the kernel is a fresh interpreter although a template was named ('' otherwise).
        self.template_note = ""
        self.proc = self._from_template(config.get("template"), env, cwd) or self._fresh(env, cwd)
        self.killed = False

    def _fresh(self, env: dict[str, str], cwd: str | None) -> subprocess.Popen[bytes]:
        module = WORKER_KERNEL if has_worker_kernel(env, cwd) else "ipykernel_launcher"
        with open(self.log_path, "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", module, "-f", self.connection_file],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=cwd, start_new_session=True, preexec_fn=owner_watch.die_with_parent,
            )

    def _from_template(self, path: str | None, env: dict[str, str], cwd: str | None) -> ForkedProcess | None:
        """Ask this host's worker template (its socket ``path``) to fork the kernel; None if it can't."""
        if not path:
            return None
        try:
            return ForkedProcess.request(path, {
                "op": "fork", "env": env, "cwd": cwd, "log": self.log_path, "owner": os.getpid(),
                "argv": ["-f", self.connection_file]})
        except (OSError, ValueError, RuntimeError) as exc:
            self.template_note = f"the worker template did not fork the kernel ({exc})"
            return None

    def wait_ports(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            ports = _read_ports(self.connection_file)
            if ports:
                return ports
            time.sleep(0.02)
        return None

    def signal(self, sig: int) -> None:
        try:
            if sig == signal.SIGINT:
                os.kill(self.proc.pid, sig)  # ipykernel's own handler turns it into KeyboardInterrupt
            else:
                os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            if sig == signal.SIGKILL and isinstance(self.proc, ForkedProcess):
                try:  # forked a moment ago: it may not lead its own process group yet
                    os.kill(self.proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    def kill(self) -> None:
        self.killed = True
        if isinstance(self.proc, ForkedProcess):
            self.proc.killed = True
        self.signal(signal.SIGKILL)

    def cleanup(self) -> None:
        self.signal(signal.SIGKILL)  # anything left in the kernel's process group
        shutil.rmtree(self.dir, ignore_errors=True)


def _command_loop(kernel: Kernel) -> None:
    """Obey the launcher's commands; stdin EOF (stop, or a dropped connection) kills the kernel."""
    while True:
        line = read_line()
        if not line:
            break
        command = line.strip()
        if command == "interrupt":
            kernel.signal(signal.SIGINT)
        elif command == "kill":
            break
    kernel.kill()


def describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


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
            send("error", kind="kernel", detail=f"the kernel {why}", log=_tail(kernel.log_path))
            return 4
        send("ready", pid=kernel.proc.pid, ports=ports, python=sys.executable, dir=kernel.dir,
             forked=isinstance(kernel.proc, ForkedProcess), note=kernel.template_note)
        rc = kernel.proc.wait()
        send("exit", returncode=rc, description=describe(rc),
             log="" if kernel.killed else _tail(kernel.log_path))
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
