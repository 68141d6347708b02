"""The user's effective SSH settings for one host, as OpenSSH itself computes them.

``ssh -G [-F FILE] [-l USER] [-p PORT] HOST`` prints the configuration ``ssh HOST`` would use
(``Host``/``Match`` blocks, ``Include``, defaults and the system-wide file all applied), so the
values handed to asyncssh match OpenSSH by construction. Where the ``ssh`` command is missing, the
config file is read with asyncssh's own parser instead, with a logged notice: ``Match exec``,
canonicalisation and the system-wide ``/etc/ssh/ssh_config`` may then differ from OpenSSH.

Which config file: OpenSSH reads ``~/.ssh/config`` of the user's *passwd* home directory (it
ignores ``$HOME``). ``MWNOTEBOOK_SSH_CONFIG`` (or the launcher's ``ssh_config``) names another
file, exactly like ``ssh -F FILE`` (which also skips the system-wide file).

Tokens: ``ssh -G`` prints ``UserKnownHostsFile`` expanded but ``IdentityFile``, ``CertificateFile``,
``ProxyCommand`` and ``IdentityAgent`` as written; :func:`expand_tokens` does what ``ssh`` does
to them when it connects.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import logging
import os
import pwd
import re
import shutil
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["SSHTarget", "SSHConfigError", "parse_ssh_g", "target_from_options", "expand_tokens",
           "resolve_target", "SSH_CONFIG_ENV"]

log = logging.getLogger(__name__)

#: Environment variable naming the SSH client config file to use instead of ~/.ssh/config.
SSH_CONFIG_ENV = "MWNOTEBOOK_SSH_CONFIG"

#: ``StrictHostKeyChecking`` as ``ssh -G`` prints it -> the policy name used here.
_STRICT = {"true": "yes", "yes": "yes", "false": "no", "no": "no", "off": "no",
           "accept-new": "accept-new", "ask": "ask"}


class SSHConfigError(Exception):
    """The SSH configuration for a host could not be read (message names the file / option)."""


@dataclass(frozen=True)
class SSHTarget:
    """Everything mwnotebook uses from the effective SSH configuration of one host."""

    alias: str  #: the name as written in --hosts (``%n``)
    hostname: str
    user: str
    port: int
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    certificate_files: tuple[str, ...] = ()
    identity_agent: str | None = None  #: None: $SSH_AUTH_SOCK; "none": no agent
    user_known_hosts: tuple[str, ...] = ()
    global_known_hosts: tuple[str, ...] = ()
    strict_host_key_checking: str = "ask"  #: yes | no | accept-new | ask
    hash_known_hosts: bool = False
    host_key_alias: str | None = None
    proxy_jump: str | None = None
    proxy_command: str | None = None
    connect_timeout: float | None = None
    server_alive_interval: float = 0.0
    address_family: str = "any"
    bind_address: str | None = None
    #: Where these values came from, for messages: "ssh -G HOST" or "asyncssh's parser (FILE)".
    source: str = ""
    raw: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH looks up and records in known_hosts: ``HostKeyAlias``, else the
        host name, as ``[host]:port`` when the port is not 22."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def parse_ssh_g(text: str) -> dict[str, tuple[str, ...]]:
    """``ssh -G`` output -> {lowercase option: values}. Options that may repeat (``identityfile``,
    ``certificatefile``, ``sendenv``, ...) keep every line, in order."""
    options: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            options.setdefault(key.lower(), []).append(value.strip())
    return {k: tuple(v) for k, v in options.items()}


def _first(options: Mapping[str, Sequence[str]], key: str, default: str = "") -> str:
    values = options.get(key)
    return values[0] if values else default


def _number(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number > 0 else None


def target_from_options(alias: str, options: Mapping[str, Sequence[str]], source: str,
                        known_hosts_expanded: bool = True) -> SSHTarget:
    """Build an :class:`SSHTarget` from parsed ``ssh -G`` options (file name tokens expanded;
    ``ssh -G`` has already expanded the known-hosts file names, asyncssh's parser has not).
    File names are split at white space, as ``ssh -G`` prints them unquoted."""
    hostname = _first(options, "hostname", alias)
    user = _first(options, "user") or getpass.getuser()
    port = int(_first(options, "port", "22") or 22)
    proxy_jump = _first(options, "proxyjump") or None
    proxy_command = _first(options, "proxycommand") or None
    if proxy_jump and proxy_jump.lower() == "none":
        proxy_jump = None
    if proxy_command and proxy_command.lower() == "none":
        proxy_command = None
    partial = SSHTarget(alias=alias, hostname=hostname, user=user, port=port,
                        proxy_jump=proxy_jump, host_key_alias=_first(options, "hostkeyalias") or None)

    def expand(value: str) -> str:
        return expand_tokens(value, partial)

    strict = _first(options, "stricthostkeychecking", "ask").lower()
    agent = _first(options, "identityagent") or None
    return SSHTarget(
        alias=alias, hostname=hostname, user=user, port=port,
        identity_files=tuple(expand(v) for v in options.get("identityfile", ())),
        identities_only=_first(options, "identitiesonly", "no").lower() in ("yes", "true"),
        certificate_files=tuple(expand(v) for v in options.get("certificatefile", ())),
        identity_agent=expand(agent) if agent and agent.lower() != "none" else agent,
        user_known_hosts=tuple(path if known_hosts_expanded else expand(path) for path in
                               " ".join(options.get("userknownhostsfile", ())).split()),
        global_known_hosts=tuple(" ".join(options.get("globalknownhostsfile", ())).split()),
        strict_host_key_checking=_STRICT.get(strict, "ask"),
        hash_known_hosts=_first(options, "hashknownhosts", "no").lower() in ("yes", "true"),
        host_key_alias=partial.host_key_alias,
        proxy_jump=proxy_jump,
        proxy_command=proxy_command,
        connect_timeout=_number(_first(options, "connecttimeout", "none")),
        server_alive_interval=_number(_first(options, "serveraliveinterval", "0")) or 0.0,
        address_family=_first(options, "addressfamily", "any").lower(),
        bind_address=_first(options, "bindaddress") or None,
        source=source, raw={k: tuple(v) for k, v in options.items()},
    )


def home_directory() -> str:
    """The home directory OpenSSH uses for ``~`` and ``%d``: the passwd entry, not ``$HOME``."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.expanduser("~")


def expand_tokens(value: str, target: SSHTarget) -> str:
    """OpenSSH's ``~``, ``${VAR}`` and ``%`` token expansion for file names and commands."""
    home = home_directory()
    local_fqdn = socket.getfqdn()
    local_short = socket.gethostname().split(".")[0]
    jump = target.proxy_jump or ""
    tokens = {
        "%": "%", "d": home, "h": target.hostname, "n": target.alias, "p": str(target.port),
        "r": target.user, "u": getpass.getuser(), "i": str(os.getuid()), "l": local_fqdn,
        "L": local_short, "j": jump, "k": target.host_key_alias or target.alias,
        "C": hashlib.sha1(f"{local_fqdn}{target.hostname}{target.port}{target.user}{jump}"
                          .encode()).hexdigest(),
    }
    text = re.sub(r"\$\{(\w+)\}", lambda m: os.environ.get(m.group(1), ""), value)
    text = re.sub(r"%(.)", lambda m: tokens.get(m.group(1), m.group(0)), text)
    if text == "~" or text.startswith("~/"):
        text = home + text[1:]
    return text


def config_file(explicit: str | None = None) -> str | None:
    """The ``-F`` file: the launcher's setting, else ``$MWNOTEBOOK_SSH_CONFIG``, else None."""
    chosen = explicit or os.environ.get(SSH_CONFIG_ENV) or None
    return os.path.expanduser(chosen) if chosen else None


async def resolve_target(host: str, user: str | None = None, port: int | None = None,
                         config: str | None = None, timeout: float = 10.0) -> SSHTarget:
    """The effective settings for ``[user@]host[:port]``: from ``ssh -G`` where ``ssh`` exists,
    else from asyncssh's config parser (with a notice)."""
    config = config_file(config)
    if config is not None and not os.path.isfile(config):
        raise SSHConfigError(f"the SSH config file {config} (from {SSH_CONFIG_ENV} or ssh_config) "
                             "does not exist")
    ssh = shutil.which("ssh")
    if ssh is None:
        return _fallback_target(host, user, port, config)
    argv = [ssh, "-G"] + (["-F", config] if config else [])
    argv += (["-l", user] if user else []) + (["-p", str(port)] if port else []) + ["--", host]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise SSHConfigError(f"`ssh -G {host}` did not answer within {timeout:.0f} s "
                             "(a slow `Match exec` in the SSH config?)") from None
    if proc.returncode != 0 and b"No user exists" in err:  # a container's uid without passwd entry
        return _fallback_target(host, user, port, config)
    if proc.returncode != 0:
        detail = err.decode(errors="replace").strip().splitlines()
        raise SSHConfigError("OpenSSH rejects the SSH configuration: "
                             + ("; ".join(detail[-3:]) or f"ssh -G exit status {proc.returncode}"))
    shown = " ".join(argv[1:-2] + [host])
    return target_from_options(host, parse_ssh_g(out.decode(errors="replace")), f"ssh {shown}")


_fallback_noticed = False


def _fallback_target(host: str, user: str | None, port: int | None, config: str | None) -> SSHTarget:
    """Settings from asyncssh's OpenSSH-config parser, extended by the options it skips."""
    global _fallback_noticed
    from mwnotebook.launchers.ssh.config_fallback import fallback_options

    path = config or os.path.join(os.path.expanduser("~"), ".ssh", "config")
    if not _fallback_noticed:
        _fallback_noticed = True
        log.warning("OpenSSH's `ssh` command is not installed: reading %s with asyncssh's parser "
                    "(Match exec, canonicalisation and /etc/ssh/ssh_config may differ from ssh)",
                    path)
    try:
        options = fallback_options(path, host, user, port)
    except Exception as exc:  # asyncssh's parser raises its own error types
        raise SSHConfigError(f"{path}: {exc}") from None
    return target_from_options(host, options, f"asyncssh's parser ({path})",
                               known_hosts_expanded=False)
