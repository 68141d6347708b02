"""The small actor that runs in each worker's placement-group bundle (stdlib only).

``launchers/ray/launcher.py`` wraps :class:`NodeRelay` with ``ray.remote`` and sends it *by value*
(``ray.cloudpickle.register_pickle_by_value``), so a node needs Ray and Python but not mwnotebook,
as an SSH host needs only Python. The relay does one thing: it starts the remote agent
(``processes/shipped/remote_agent.py``, the one SSH and Slurm run) as its child whenever the
launcher connects, and makes that TCP connection the agent's stdin and stdout. Measured simpler
than carrying lines through actor calls: the agent's protocol, its pings and its "stdin closed: kill
the kernel" rule work unchanged, and no thread copies bytes.

A connection starts with a fixed-size header, ``TOKEN CHANNEL\\n``: the token (given to the actor
when it was made, so only its launcher can start agents through it) and a channel id the launcher
later asks about (:meth:`NodeRelay.wait`, :meth:`NodeRelay.kill`). Then the agent's source follows,
as the agent's ``BOOTSTRAP`` reads it.

Lifecycle: every agent gets ``PR_SET_PDEATHSIG`` (SIGKILL) relative to the relay's accepting
thread, which lives as long as the actor's process: when Ray ends the actor (cluster stop, the
notebook's driver died, the node lost its raylet) the agents die, and their kernels with them
(the agent's own rule). Agents start at CPU priority 0 and without the ``OMP_NUM_THREADS`` Ray set
for the actor: the worker's thread counts are set by the launcher in the kernel's environment.
"""

from __future__ import annotations

import hmac
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Any

#: Length of the token and of the channel id, in hex characters.
TOKEN_CHARS = 32
CHANNEL_CHARS = 16
HEADER_BYTES = TOKEN_CHARS + 1 + CHANNEL_CHARS + 1
#: Variables Ray sets for the actor's process that a worker must not inherit.
ACTOR_ONLY_ENV = ("OMP_NUM_THREADS",)
#: Set in the agent before anything else: die with the relay (Linux), run at normal priority.
_AGENT_PRELUDE = (
    "import ctypes,os,sys\n"
    "try:\n ctypes.CDLL(None).prctl(1,9,0,0,0)\nexcept Exception:\n pass\n"
    "try:\n os.setpriority(os.PRIO_PROCESS,0,0)\nexcept Exception:\n pass\n"
)


class NodeRelay:
    """Starts remote agents on this node for one launcher (see the module docstring)."""

    def __init__(self, node_ip: str, token: str, bootstrap: str, python: str | None = None) -> None:
        self._token = token.encode()
        self._bootstrap = bootstrap
        self._python = python or sys.executable
        self._dir = tempfile.mkdtemp(prefix="mwnotebook-ray-")
        self._agents: dict[str, subprocess.Popen[bytes]] = {}
        self._changed = threading.Condition()
        self._listener = socket.create_server((node_ip, 0), backlog=16)
        self._ip = node_ip
        threading.Thread(target=self._accept, name="mwnotebook-relay", daemon=True).start()

    def where(self) -> dict[str, Any]:
        """Where the launcher connects, and what runs here."""
        return {"ip": self._ip, "port": self._listener.getsockname()[1], "pid": os.getpid(),
                "python": self._python, "version": sys.version.split()[0],
                "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            try:
                self._start_agent(conn)
            except Exception as exc:  # a bad or slow client: this connection only
                sys.stderr.write(f"mwnotebook relay: connection refused: {exc}\n")
            finally:
                conn.close()  # the agent holds its own copy

    def _start_agent(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        header = b""
        while len(header) < HEADER_BYTES:
            chunk = conn.recv(HEADER_BYTES - len(header))
            if not chunk:
                raise ConnectionError("closed before its header")
            header += chunk
        conn.settimeout(None)
        token, channel = header[:TOKEN_CHARS], header[TOKEN_CHARS + 1:-1].decode("ascii", "replace")
        if not hmac.compare_digest(token, self._token):
            raise PermissionError("wrong token")
        env = {k: v for k, v in os.environ.items() if k not in ACTOR_ONLY_ENV}
        log = open(os.path.join(self._dir, f"{channel}.err"), "wb")  # the child's stderr
        try:
            proc = subprocess.Popen([self._python, "-u", "-c", _AGENT_PRELUDE + self._bootstrap],
                                    stdin=conn.fileno(), stdout=conn.fileno(), stderr=log, env=env,
                                    cwd=self._dir, close_fds=True)
        finally:
            log.close()
        with self._changed:
            self._agents[channel] = proc
            self._changed.notify_all()

    def wait(self, channel: str, start_timeout: float = 60.0) -> tuple[int | None, str]:
        """Block until the agent of ``channel`` has ended: ``(returncode, the end of its stderr)``;
        ``(None, reason)`` when no agent started for it within ``start_timeout`` s."""
        with self._changed:
            if not self._changed.wait_for(lambda: channel in self._agents, start_timeout):
                return None, "no agent started for this channel"
            proc = self._agents[channel]
        code = proc.wait()
        try:
            with open(os.path.join(self._dir, f"{channel}.err"), "rb") as f:
                tail = f.read()[-4000:].decode(errors="replace")
        except OSError:
            tail = ""
        return code, tail

    def kill(self, channel: str) -> None:
        """End one agent at once (SIGKILL; its kernel dies with it)."""
        with self._changed:
            proc = self._agents.get(channel)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)

    def stop(self) -> None:
        """Close the listener and end every agent (the kernels die with them)."""
        self._listener.close()
        with self._changed:
            procs = list(self._agents.values())
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the agent kills its kernel's process group
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self._dir, ignore_errors=True)
