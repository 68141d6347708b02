"""Worker kernels on remote hosts over SSH (asyncssh; the user's ~/.ssh/config, agent and
known_hosts are honoured through asyncssh's defaults).

Per host, one SSH connection carries everything:

* ``tf_addresses`` runs the remote agent (``ssh_remote.py``) in its ``ports`` role: it checks the
  interpreter and the required modules, then holds one TCP port per worker on that host for
  TensorFlow's gRPC server. The cluster list uses the address the host was reached at (or the
  ``tf_address`` override), so workers reach each other the way the notebook reached them.
* ``start`` runs the agent in its ``kernel`` role. The agent source and then the configuration
  (signing key, TF_CONFIG and the rest of the worker environment) travel on the channel's stdin;
  the command line is only ``exec PYTHON -u -c BOOTSTRAP``. The kernel binds 127.0.0.1 on its
  host; each of its five ZMQ ports is reached through an SSH local port forward on the
  notebook's loopback, and ``connection_info`` names those forwarded ports.
* interrupt / kill are lines sent to the agent; the agent reports the kernel's exit. Closing the
  channel (stop, or a lost connection) makes the agent kill the kernel's process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import socket
import uuid
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Tuple

import asyncssh

from ..errors import ClusterStartError, ConfigError
from ..hosts import HostSpec, HostsArg, worker_hosts
from ..tf_config import format_address
from .ssh_remote import BOOTSTRAP

__all__ = ["SSHLauncher", "SSHKernelHandle", "parse_tf_address"]

log = logging.getLogger(__name__)

_AGENT_SOURCE = Path(__file__).with_name("ssh_remote.py").read_text(encoding="utf-8")
_CHANNELS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
DEFAULT_REQUIRE = ("ipykernel", "tensorflow")
#: Upper bound on SSH connections to one host (each carries up to sshd's MaxSessions sessions).
MAX_CONNECTIONS_PER_HOST = 16

HostKey = Tuple[str, Optional[str], Optional[int]]


def parse_tf_address(value: str | None, placement: Sequence[HostSpec]) -> dict[str, str]:
    """``--tf-address``: ``ADDR`` (one host only) or ``host=ADDR,host2=ADDR2``, keyed by the host
    as written in ``--hosts`` (with or without ``user@``/``:port``)."""
    if not value:
        return {}
    targets = {spec.target: spec for spec in placement}
    if "=" not in value:
        if len({spec.key for spec in placement}) > 1:
            raise ConfigError(
                f"--tf-address {value} names one address but the workers are on several hosts; "
                "write host=address pairs, e.g. --tf-address a=10.0.0.1,b=10.0.0.2"
            )
        return {spec.target: value.strip() for spec in placement}
    result: dict[str, str] = {}
    for pair in value.split(","):
        name, _, addr = pair.partition("=")
        name, addr = name.strip(), addr.strip()
        matches = [t for t, s in targets.items() if name in (t, s.host)]
        if not matches or not addr:
            raise ConfigError(f"--tf-address {pair!r}: {name!r} is not one of the --hosts")
        for target in matches:
            result[target] = addr
    return result


class _Agent:
    """One run of the remote agent on an SSH channel."""

    def __init__(self, process: asyncssh.SSHClientProcess, host: str) -> None:
        self.process = process
        self.host = host
        self._stderr: list[str] = []
        self._stderr_task = asyncio.ensure_future(self._drain_stderr())

    @classmethod
    async def start(cls, conn: asyncssh.SSHClientConnection, host: str, python: str) -> "_Agent":
        """Run the agent, which then waits for :meth:`configure`; raises
        ``asyncssh.ChannelOpenError`` when the connection has no room for another session."""
        command = f"exec {shlex.quote(python)} -u -c {shlex.quote(BOOTSTRAP)}"
        process = await conn.create_process(command, encoding="utf-8")
        agent = cls(process, host)
        process.stdin.write(f"{len(_AGENT_SOURCE)}\n{_AGENT_SOURCE}")
        return agent

    def configure(self, config: Mapping[str, Any]) -> None:
        """Hand the agent its role and settings (one JSON line: never on a command line)."""
        self.process.stdin.write(json.dumps(dict(config)) + "\n")

    @property
    def usable(self) -> bool:
        """Still running and not yet configured (a spare started ahead of time)."""
        return not self.process.is_closing() and self.process.exit_status is None

    async def _drain_stderr(self) -> None:
        with contextlib.suppress(Exception):
            while chunk := await self.process.stderr.read(4096):
                self._stderr.append(chunk)
                del self._stderr[:-8]

    async def next_event(self) -> dict[str, Any] | None:
        """The next JSON event, or None when the channel closed."""
        while line := await self.process.stdout.readline():
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if isinstance(event, dict):
                return event
            log.debug("unexpected line from the agent on %s: %r", self.host, line)
        return None

    def send(self, line: str) -> None:
        with contextlib.suppress(Exception):
            self.process.stdin.write(line + "\n")

    async def why_it_ended(self, python: str) -> str:
        """A one-line reason after the agent ended without an event (bad interpreter, crash)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.process.wait_closed(), 3)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._stderr_task, 1)
        status = self.process.exit_status
        stderr = "".join(self._stderr).strip()
        if status == 127:
            return (f"Python interpreter {python!r} was not found on the host; pass --python "
                    "with the path of the interpreter that has ipykernel and tensorflow")
        if status == 126:
            return f"{python!r} on the host is not executable"
        last = stderr.splitlines()[-1] if stderr else ""
        return f"the remote agent ended (exit status {status}){': ' + last if last else ''}"

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self.process.stdin.write_eof()
        with contextlib.suppress(Exception):
            self.process.close()
            await asyncio.wait_for(self.process.wait_closed(), 3)
        self._stderr_task.cancel()


def _agent_error(event: Mapping[str, Any], python: str) -> str:
    if event.get("kind") == "missing":
        modules = ", ".join(event.get("modules", []))
        return (f"Python {event.get('version', '?')} at {event.get('python', python)} lacks {modules}; "
                "install them there (the same environment as the notebook), or point --python "
                "at an interpreter that has them")
    detail = str(event.get("detail", "the remote agent failed"))
    tail = str(event.get("log", "")).strip()
    return f"{detail}" + (f"; kernel log ends with:\n{tail[-1500:]}" if tail else "")


class SSHKernelHandle:
    """A kernel on a remote host, reached through SSH port forwards (see the module docstring)."""

    def __init__(self, index: int, spec: HostSpec, agent: _Agent, pid: int,
                 listeners: list[asyncssh.SSHListener], connection_info: dict[str, Any]) -> None:
        self.index = index
        self.host = spec.target
        self._agent = agent
        self._pid = pid
        self._listeners = listeners
        self._connection_info = connection_info
        self._exit = ""
        self._log_tail = ""
        #: The kernel's private directory on its host (connection file, log); gone after kill().
        self.remote_dir = ""
        self._ended = asyncio.Event()
        self._watch = asyncio.ensure_future(self._watch_agent())

    @property
    def connection_info(self) -> dict[str, Any]:
        return dict(self._connection_info)

    @property
    def pid(self) -> int | None:
        """The kernel's process id on its own host."""
        return self._pid

    async def _watch_agent(self) -> None:
        try:
            while (event := await self._agent.next_event()) is not None:
                if event.get("event") == "exit":
                    self._exit = str(event.get("description", "exited"))
                    self._log_tail = str(event.get("log", ""))
                    break
        except Exception:  # the channel broke: treated like a closed one below
            log.debug("agent channel for worker %d on %s failed", self.index, self.host,
                      exc_info=True)
        finally:
            if not self._exit:
                self._exit = f"lost the SSH connection to {self.host}"
            self._ended.set()

    async def is_alive(self) -> bool:
        return not self._ended.is_set()

    def exit_description(self) -> str:
        return self._exit if self._ended.is_set() else ""

    def log_tail(self, lines: int = 20) -> str:
        """The end of the kernel's own output when it died by itself (empty otherwise)."""
        return "".join(self._log_tail.splitlines(keepends=True)[-lines:])

    async def wait(self) -> None:
        """Until the kernel has ended (for tests and watchers)."""
        await self._ended.wait()

    async def interrupt(self) -> None:
        if not self._ended.is_set():
            self._agent.send("interrupt")

    async def kill(self) -> None:
        if not self._ended.is_set():
            self._agent.send("kill")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._ended.wait()), 5)
        await self._agent.close()  # stdin EOF: the agent kills anything still running
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        if not self._watch.done():
            self._watch.cancel()
        self._ended.set()
        if not self._exit:
            self._exit = "killed"


class SSHLauncher:
    """Starts worker kernels on SSH hosts. Worker ``i`` runs on ``worker_hosts(hosts)[i]``."""

    def __init__(
        self,
        hosts: HostsArg,
        *,
        workers: int | None = None,
        workers_per_host: int | None = None,
        python: str | None = None,
        tf_address: str | None = None,
        require: Sequence[str] = DEFAULT_REQUIRE,
        connect_timeout: float = 10.0,
        startup_timeout: float = 60.0,
        cwd: str | None = None,
        ssh_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.placement = worker_hosts(hosts, workers, workers_per_host)
        self.python = python or "python3"
        self.require = tuple(require)
        self.connect_timeout = connect_timeout
        self.startup_timeout = startup_timeout
        self.cwd = cwd
        self._tf_override = parse_tf_address(tf_address, self.placement)
        self._ssh_options = dict(ssh_options or {})
        # Per host: its connections, newest last. A connection that refused a new session (sshd's
        # MaxSessions, 10 by default) is "full"; later sessions go to a new connection.
        self._conns: dict[HostKey, list[asyncssh.SSHClientConnection]] = {}
        self._full: set[asyncssh.SSHClientConnection] = set()
        self._conn_locks: dict[HostKey, asyncio.Lock] = {}
        self._holders: list[_Agent] = []
        self._spares: dict[int, tuple[asyncssh.SSHClientConnection, _Agent]] = {}
        self._handles: list[SSHKernelHandle] = []

    @classmethod
    def from_spec(cls, spec: Any) -> "SSHLauncher":
        """Build from a ``ClusterSpec`` (``hosts``, ``workers``, ``python``, ``tf_address``,
        ``startup_timeout`` and, where the spec has it, ``workers_per_host``)."""
        return cls(
            spec.hosts,
            workers=spec.workers,
            workers_per_host=getattr(spec, "workers_per_host", None),
            python=spec.python,
            tf_address=spec.tf_address,
            startup_timeout=spec.startup_timeout,
        )

    # -- connections ---------------------------------------------------------------------------

    async def _connect(self, spec: HostSpec) -> asyncssh.SSHClientConnection:
        """A live connection to ``spec``'s host with room for another session."""
        lock = self._conn_locks.setdefault(spec.key, asyncio.Lock())
        async with lock:
            for conn in reversed(self._conns.get(spec.key, [])):
                if conn not in self._full and not conn.is_closed():
                    return conn
            options: dict[str, Any] = {"keepalive_interval": 15, "keepalive_count_max": 4,
                                       "connect_timeout": self.connect_timeout}
            if spec.user:
                options["username"] = spec.user
            if spec.port:
                options["port"] = spec.port
            options.update(self._ssh_options)
            try:
                conn = await asyncio.wait_for(asyncssh.connect(spec.host, **options),
                                              self.connect_timeout + 1)
            except Exception as exc:  # asyncssh, socket and timeout errors alike
                reason = _describe_connect_error(exc, spec, self.connect_timeout)
                raise ClusterStartError(f"{spec.target}: {reason}", host=spec.target) from None
            log.debug("connected to %s", spec.target)
            self._conns.setdefault(spec.key, []).append(conn)
            return conn

    async def _run_agent(self, spec: HostSpec) -> tuple[asyncssh.SSHClientConnection, _Agent]:
        """Start the agent on ``spec``'s host, on a new connection if the current one is full."""
        for _ in range(MAX_CONNECTIONS_PER_HOST):
            conn = await self._connect(spec)
            try:
                return conn, await _Agent.start(conn, spec.target, self.python)
            except asyncssh.ChannelOpenError as exc:
                log.debug("%s refused another session (%s); opening another connection",
                          spec.target, exc.reason)
                self._full.add(conn)
        raise ClusterStartError(f"{spec.target}: the SSH server refused more sessions "
                                f"(after {MAX_CONNECTIONS_PER_HOST} connections)", host=spec.target)

    # -- TensorFlow addresses ------------------------------------------------------------------

    async def tf_addresses(self, count: int) -> list[str]:
        """Reserve one gRPC port per worker on each worker's own host; ``host:port`` per worker."""
        if count != len(self.placement):
            raise ConfigError(f"{count} workers requested but the hosts have "
                              f"{len(self.placement)} worker slots")
        await self._release_ports()
        by_host: dict[HostKey, list[int]] = {}
        for index, spec in enumerate(self.placement):
            by_host.setdefault(spec.key, []).append(index)
        addresses: list[str] = [""] * count

        async def reserve(indices: list[int]) -> None:
            spec = self.placement[indices[0]]
            _, agent = await self._run_agent(spec)
            self._holders.append(agent)
            agent.configure({"role": "ports", "count": len(indices), "require": list(self.require)})
            # While the host answers, start the kernels' agents: their interpreters load in
            # parallel, and start() only has to hand each its configuration.
            spares = asyncio.ensure_future(self._start_spares(indices))
            try:
                event = await self._first_event(agent, spec, self.connect_timeout + 10)
            finally:
                await spares
            host_address = self._tf_override.get(spec.target) or str(event["address"])
            for index, port in zip(indices, event["ports"]):
                addresses[index] = format_address(host_address, int(port))

        results = await asyncio.gather(*(reserve(ix) for ix in by_host.values()),
                                       return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self._release_ports()
            raise errors[0]
        log.info("TensorFlow addresses: %s", addresses)
        return addresses

    async def _start_spares(self, indices: list[int]) -> None:
        for index in indices:
            try:
                self._spares[index] = await self._run_agent(self.placement[index])
            except Exception:  # start() will try again and report the problem
                log.debug("no spare agent for worker %d", index, exc_info=True)
                return

    async def _release_ports(self) -> None:
        holders, self._holders = self._holders, []
        spares, self._spares = list(self._spares.values()), {}
        await asyncio.gather(*(h.close() for h in holders), *(a.close() for _, a in spares),
                             return_exceptions=True)

    async def _first_event(self, agent: _Agent, spec: HostSpec, timeout: float) -> dict[str, Any]:
        """The agent's first event, raising ClusterStartError (naming the host) for failures."""
        try:
            event = await asyncio.wait_for(agent.next_event(), timeout)
        except asyncio.TimeoutError:
            await agent.close()
            raise ClusterStartError(f"{spec.target}: no answer from the remote agent within "
                                    f"{timeout:.0f} s", host=spec.target) from None
        if event is None:
            reason = await agent.why_it_ended(self.python)
            await agent.close()
            raise ClusterStartError(f"{spec.target}: {reason}", host=spec.target)
        if event.get("event") == "error":
            await agent.close()
            raise ClusterStartError(f"{spec.target}: {_agent_error(event, self.python)}",
                                    host=spec.target)
        return event

    # -- kernels -------------------------------------------------------------------------------

    async def start(self, index: int, env: Mapping[str, str]) -> SSHKernelHandle:
        if not 0 <= index < len(self.placement):
            raise ConfigError(f"worker {index} has no host (hosts give {len(self.placement)} slots)")
        spec = self.placement[index]
        try:
            return await self._start(index, spec, env)
        except ClusterStartError as exc:
            exc.worker = index
            raise

    async def _start(self, index: int, spec: HostSpec, env: Mapping[str, str]) -> SSHKernelHandle:
        key = str(uuid.uuid4())
        spare = self._spares.pop(index, None)
        if spare is not None and spare[1].usable and not spare[0].is_closed():
            conn, agent = spare
        else:
            if spare is not None:
                await spare[1].close()
            conn, agent = await self._run_agent(spec)
        listeners: list[asyncssh.SSHListener] = []
        try:
            agent.configure({
                "role": "kernel", "key": key, "signature_scheme": "hmac-sha256",
                "env": dict(env), "require": list(self.require), "cwd": self.cwd,
                "timeout": self.startup_timeout,
            })
            event = await self._first_event(agent, spec, self.startup_timeout + 5)
            if event.get("event") != "ready":
                raise ClusterStartError(f"{spec.target}: unexpected agent reply {event.get('event')!r}",
                                        host=spec.target)
            info: dict[str, Any] = {"ip": "127.0.0.1", "transport": "tcp", "key": key,
                                    "signature_scheme": "hmac-sha256", "kernel_name": ""}
            for name in _CHANNELS:
                listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1",
                                                         int(event["ports"][name]))
                listeners.append(listener)
                info[name] = listener.get_port()
        except BaseException:
            for listener in listeners:
                listener.close()
            await agent.close()
            raise
        handle = SSHKernelHandle(index, spec, agent, int(event["pid"]), listeners, info)
        handle.remote_dir = str(event.get("dir", ""))
        self._handles = [h for h in self._handles if not h._ended.is_set()] + [handle]
        log.info("worker %d: kernel pid %s on %s", index, handle.pid, spec.target)
        return handle

    async def close(self) -> None:
        """Kill every kernel this launcher started, release the ports, close the connections."""
        handles, self._handles = self._handles, []
        await asyncio.gather(*(h.kill() for h in handles), return_exceptions=True)
        await self._release_ports()
        conns = [conn for host_conns in self._conns.values() for conn in host_conns]
        self._conns, self._full = {}, set()
        for conn in conns:
            conn.close()
        for conn in conns:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)


def _describe_connect_error(exc: BaseException, spec: HostSpec, timeout: float) -> str:
    """Turn an asyncssh/socket failure into one sentence that says what to check."""
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return ("the SSH host key is not trusted (it is missing from, or does not match, "
                "~/.ssh/known_hosts). Check the key with `ssh " + spec.target + "`; a changed key "
                "can mean a reinstalled host, or someone in between")
    if isinstance(exc, asyncssh.PermissionDenied):
        return ("SSH authentication was refused: no key was accepted for this user. Add your "
                "public key to the host's ~/.ssh/authorized_keys, load it into ssh-agent, or "
                "name it with IdentityFile in ~/.ssh/config")
    if isinstance(exc, asyncssh.DisconnectError):
        return f"the SSH connection failed: {exc.reason}"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return f"no SSH answer within {timeout:.0f} s (host down, or the port filtered?)"
    if isinstance(exc, socket.gaierror):
        return f"unknown host name ({exc.strerror})"
    if isinstance(exc, ConnectionRefusedError):
        return "the connection was refused (is sshd running on that port?)"
    if isinstance(exc, OSError):
        reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
        return f"cannot connect: {reason}"
    return f"SSH connection failed: {type(exc).__name__}: {exc}"
