"""One SSH connection to a ``--hosts`` entry, made the way OpenSSH would make it.

The host's effective settings come from ``ssh -G`` (``ssh_config.py``): host name, user, port,
identity files, agent, known-hosts files and ``StrictHostKeyChecking`` (``ssh_known_hosts.py``),
``HostKeyAlias``, ``ProxyJump`` (each hop resolved with its own settings; the first hop's own
``ProxyJump`` applies too, as with ``ssh``), ``ProxyCommand``, ``ConnectTimeout``,
``AddressFamily``, ``BindAddress``. asyncssh's own config parsing is switched off (``config=[]``),
so nothing is read twice or differently. Algorithms (``Ciphers``, ``KexAlgorithms``, ...) are
asyncssh's defaults.

Keepalive: mwnotebook sends an SSH keepalive every ``keepalive_interval`` seconds of silence and
drops the connection after ``keepalive_count_max`` unanswered ones, so a silently dead network is
noticed in ``interval * (count + 1)`` seconds (a user's shorter ``ServerAliveInterval`` wins).
"""

from __future__ import annotations

import asyncio
import os
import socket
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from mwnotebook.config.hosts import HostSpec
from mwnotebook.launchers.ssh.config import SSHConfigError, SSHTarget, resolve_target
from mwnotebook.launchers.ssh.known_hosts import HostKeyCheck

__all__ = ["SSHConnection", "SSHConnectError", "open_connection", "loss_reason"]

#: How deep ProxyJump chains may nest (a loop in the config would otherwise never end).
MAX_JUMP_DEPTH = 8


class SSHConnectError(Exception):
    """A connection could not be made; the message says why and what to check. ``transient``:
    the host did not answer (down, or its network), as opposed to a refusal by SSH itself."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class _Client(asyncssh.SSHClient):
    """Applies the host-key policy and remembers why the connection ended."""

    def __init__(self, check: HostKeyCheck) -> None:
        self.check = check
        self.lost: Exception | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self.check.decide(key)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc


_clients: weakref.WeakKeyDictionary[asyncssh.SSHClientConnection, _Client] = weakref.WeakKeyDictionary()


@dataclass
class SSHConnection:
    """A connection to a host plus the jump-host connections it runs through (closed with it)."""

    conn: asyncssh.SSHClientConnection
    target: SSHTarget
    jumps: list[asyncssh.SSHClientConnection] = field(default_factory=list)

    def close(self) -> None:
        for conn in [self.conn, *reversed(self.jumps)]:
            conn.close()

    async def wait_closed(self, timeout: float = 5) -> None:
        for conn in [self.conn, *self.jumps]:
            try:
                await asyncio.wait_for(conn.wait_closed(), timeout)
            except Exception:
                pass


def loss_reason(conn: asyncssh.SSHClientConnection, keepalive_seconds: float) -> str:
    """Why a connection ended, in words ('' if unknown or closed by us)."""
    client = _clients.get(conn)
    exc = client.lost if client else None
    if exc is None:
        return ""
    if "keepalive" in str(exc):
        return f"no answer from the host for {keepalive_seconds:.0f} s (SSH keepalive)"
    return str(exc)


async def open_connection(spec: HostSpec, *, connect_timeout: float, keepalive_interval: float,
                          keepalive_count_max: int, ssh_config: str | None = None,
                          extra_options: Mapping[str, Any] | None = None) -> SSHConnection:
    """Connect to ``spec`` as ``ssh`` would; raises :class:`SSHConnectError` naming the cause."""
    try:
        target = await resolve_target(spec.host, spec.user, spec.port, ssh_config)
    except SSHConfigError as exc:
        raise SSHConnectError(str(exc)) from None
    opener = _Opener(connect_timeout, keepalive_interval, keepalive_count_max, ssh_config,
                     dict(extra_options or {}))
    jumps: list[asyncssh.SSHClientConnection] = []
    try:
        conn = await opener.connect(target, jumps, depth=0)
    except BaseException:
        for jump in reversed(jumps):
            jump.close()
        raise
    return SSHConnection(conn, target, jumps)


def _split_hop(hop: str) -> tuple[str, str | None, int | None]:
    """``[user@]host[:port]`` or ``ssh://[user@]host[:port]`` of a ProxyJump list."""
    text = hop.strip().removeprefix("ssh://")
    user, _, rest = text.rpartition("@")
    host, port = rest, None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") else None
    elif rest.count(":") == 1:
        host, _, number = rest.partition(":")
        port = int(number)
    return host, user or None, port


@dataclass
class _Opener:
    connect_timeout: float
    keepalive_interval: float
    keepalive_count_max: int
    ssh_config: str | None
    extra: dict[str, Any]

    async def connect(self, target: SSHTarget, jumps: list[asyncssh.SSHClientConnection],
                      depth: int, via: asyncssh.SSHClientConnection | None = None
                      ) -> asyncssh.SSHClientConnection:
        if depth > MAX_JUMP_DEPTH:
            raise SSHConnectError(f"ProxyJump chain deeper than {MAX_JUMP_DEPTH} hops "
                                  f"(a loop in the SSH config?) at {target.alias}")
        if via is None and target.proxy_jump:
            hops = [h for h in target.proxy_jump.split(",") if h.strip()]
            for number, hop in enumerate(hops):
                host, user, port = _split_hop(hop)
                try:
                    hop_target = await resolve_target(host, user, port, self.ssh_config)
                except SSHConfigError as exc:
                    raise SSHConnectError(f"ProxyJump {hop}: {exc}") from None
                try:
                    # The first hop runs with its own settings (its own ProxyJump included);
                    # later hops go through the previous one, as `ssh -J a,b` does.
                    via = await self.connect(hop_target, jumps, depth + 1, via if number else None)
                except SSHConnectError as exc:
                    raise SSHConnectError(f"via ProxyJump {hop}: {exc}", exc.transient) from None
                jumps.append(via)
        return await self._connect_one(target, via)

    async def _connect_one(self, target: SSHTarget,
                           via: asyncssh.SSHClientConnection | None) -> asyncssh.SSHClientConnection:
        check = HostKeyCheck(target)
        client = _Client(check)
        keys, key_notes = _load_identities(target)
        interval = self.keepalive_interval
        if target.server_alive_interval:
            interval = min(interval, target.server_alive_interval)
        timeout = target.connect_timeout or self.connect_timeout
        options: dict[str, Any] = {
            "username": target.user, "known_hosts": check.known_hosts_arg(), "config": [],
            "client_factory": lambda: client, "connect_timeout": timeout,
            "keepalive_interval": interval, "keepalive_count_max": self.keepalive_count_max,
        }
        if target.host_key_alias:
            options["host_key_alias"] = target.host_key_alias
        agent = _agent_path(target)
        if keys:
            options["client_keys"] = keys
            options["agent_path"] = agent
        elif agent:
            options["agent_path"] = agent  # asyncssh then also tries its default key files
        else:
            options["client_keys"] = None
        if via is not None:
            options["tunnel"] = via
        elif target.proxy_command:
            options["proxy_command"] = ["/bin/sh", "-c", "exec " + target.proxy_command]
        if target.address_family in ("inet", "inet6"):
            options["family"] = socket.AF_INET if target.address_family == "inet" else socket.AF_INET6
        if target.bind_address:
            options["local_addr"] = (target.bind_address, 0)
        options.update(self.extra)
        try:
            conn = await asyncio.wait_for(asyncssh.connect(target.hostname, target.port, **options),
                                          timeout + 1)
        except Exception as exc:  # asyncssh, socket and timeout errors alike
            transient = isinstance(exc, (asyncio.TimeoutError, TimeoutError, asyncssh.ConnectionLost)) or (
                isinstance(exc, OSError) and not isinstance(exc, socket.gaierror))
            raise SSHConnectError(describe_connect_error(exc, target, check, key_notes, timeout),
                                  transient=transient) from None
        _clients[conn] = client
        return conn


def _agent_path(target: SSHTarget) -> str | None:
    """The ssh-agent socket to use (None: no agent)."""
    if target.identities_only:
        return None
    agent = target.identity_agent
    if agent is None or agent == "SSH_AUTH_SOCK":
        return os.environ.get("SSH_AUTH_SOCK") or None
    if agent.lower() == "none":
        return None
    if agent.startswith("$"):
        return os.environ.get(agent[1:]) or None
    return agent


def _load_identities(target: SSHTarget) -> tuple[list[asyncssh.SSHKeyPair], list[str]]:
    """The key pairs of the IdentityFiles that exist and are not passphrase-protected (those
    are left to the agent, as ssh without a terminal does), and notes on the rest."""
    keys: list[asyncssh.SSHKeyPair] = []
    notes: list[str] = []
    certs = [c for c in target.certificate_files if os.path.exists(c)]
    for path in target.identity_files:
        if not os.path.exists(path):
            notes.append(f"{path}: not found")
            continue
        try:
            loaded = asyncssh.load_keypairs([path], certlist=certs, ignore_encrypted=True)
        except (OSError, asyncssh.KeyImportError, ValueError) as exc:
            notes.append(f"{path}: {getattr(exc, 'strerror', None) or exc}")
            continue
        if not loaded:
            notes.append(f"{path}: passphrase-protected (use ssh-agent)")
        keys.extend(loaded)
    return keys, notes


def describe_connect_error(exc: BaseException, target: SSHTarget, check: HostKeyCheck,
                           key_notes: list[str], timeout: float) -> str:
    """Turn an asyncssh/socket failure into one sentence that says what to check."""
    where = f"{target.user}@{target.hostname}:{target.port}"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return check.error_text(exc)
    if isinstance(exc, asyncssh.PermissionDenied):
        tried = "; ".join(key_notes) if key_notes else ", ".join(target.identity_files) or "none"
        agent = _agent_path(target)
        return (f"SSH authentication as {target.user!r} was refused: no key was accepted "
                f"(IdentityFile: {tried}; ssh-agent: {agent or 'none'}; from {target.source}). Add "
                "your public key to the host's ~/.ssh/authorized_keys, load it into ssh-agent, or "
                "name it with IdentityFile in the SSH config")
    if isinstance(exc, asyncssh.DisconnectError):
        return f"the SSH connection to {where} failed: {exc.reason}"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return f"no SSH answer within {timeout:.0f} s from {where} (host down, or the port filtered?)"
    if isinstance(exc, socket.gaierror):
        return f"unknown host name {target.hostname!r} ({exc.strerror}; from {target.source})"
    if isinstance(exc, ConnectionRefusedError):
        return f"the connection to {where} was refused (is sshd running on that port?)"
    if isinstance(exc, OSError):
        reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
        subject = f" ({exc.filename})" if exc.filename else ""
        return f"cannot connect to {where}: {reason}{subject}"
    return f"SSH connection to {where} failed: {type(exc).__name__}: {exc}"
