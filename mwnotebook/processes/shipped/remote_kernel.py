"""How the remote agent (``remote_agent.py``, ``kernel`` role) starts and watches a worker kernel
on its host (stdlib only, sent along with the agent: ``processes/shipped/__init__.py`` ``HELPERS``):
a fresh interpreter (mwnotebook's worker kernel where the kernel's interpreter can import it, else
``ipykernel_launcher``) or a fork by the host's worker template (``remote_template.py``), in a
private 0700 directory with a 0600 connection file."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

try:  # imported as part of the package
    from . import owner_watch
except ImportError:  # run from source: the helper was sent along (processes/shipped/__init__.py bundle)
    import owner_watch  # type: ignore[no-redef]

#: mwnotebook's worker kernel (ipykernel plus the worker runtime: processes/worker_kernel.py), run
#: instead of ``ipykernel_launcher`` on a host where the kernel's interpreter can import it.
WORKER_KERNEL = "mwnotebook.processes.worker_kernel"
#: ``0`` in the worker's environment starts plain ``ipykernel_launcher`` anyway (to measure the
#: difference: benchmarks/probes/remote_worker_kernel.py); remote_template.py reads the same name.
WORKER_KERNEL_ENV = "MWNOTEBOOK_REMOTE_WORKER_KERNEL"

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



def _read_ports(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None  # not there yet, or caught mid-write
    names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    ports = {name: int(info.get(name) or 0) for name in names}
    return ports if all(ports.values()) else None


def tail(path: str, limit: int = 2000) -> str:
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


def describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"
