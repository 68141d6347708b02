"""Host-key checking as OpenSSH does it, for connections made with asyncssh.

asyncssh, left to itself, fails on a ``UserKnownHostsFile`` that does not exist and ignores
``StrictHostKeyChecking``. Here, as in OpenSSH (measured against ``ssh`` 9.2):

* every ``UserKnownHostsFile`` and ``GlobalKnownHostsFile`` is read; a missing or unreadable one
  counts as empty; ``/dev/null`` is simply empty;
* the name looked up is ``HostKeyAlias``, else the host name (``[host]:port`` off port 22);
* a key that matches a known key (or a certificate from a ``@cert-authority``) is accepted;
  a ``@revoked`` key is refused;
* a *changed* key (the host has a known key of the offered key's type, and it differs) is refused
  for every ``StrictHostKeyChecking`` value. OpenSSH with ``no`` still connects but turns off port
  forwarding, which mwnotebook cannot work without, so refusing is the same outcome;
* a *new* key (no known key of that type): ``yes`` and ``ask`` refuse (nobody can answer the
  question); ``accept-new`` and ``no`` accept it and append it to the first ``UserKnownHostsFile``
  (hashed if ``HashKnownHosts yes``), creating the file with the permissions ``ssh`` gives it
  (0666 minus the umask); a missing directory is not created (``ssh`` only warns).

``CheckHostIP`` (off by default since OpenSSH 8.5) is not implemented.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
from dataclasses import dataclass, field

import asyncssh

from mwnotebook.launchers.ssh.config import SSHTarget

__all__ = ["KnownEntry", "HostKeyCheck", "read_known_hosts", "pattern_matches", "known_hosts_line"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnownEntry:
    path: str
    line: int
    marker: str | None  #: None, "cert-authority" or "revoked"
    patterns: str
    key: asyncssh.SSHKey

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def read_known_hosts(paths: tuple[str, ...]) -> list[KnownEntry]:
    """Every parseable entry of the files, in order; missing/unreadable files and bad lines are
    skipped, as OpenSSH does."""
    entries: list[KnownEntry] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            log.debug("known-hosts file %s not read: %s", path, exc)
            continue
        for number, raw in enumerate(lines, 1):
            parts = raw.split()
            if not parts or parts[0].startswith("#"):
                continue
            marker = None
            if parts[0].startswith("@"):
                marker, parts = parts[0][1:], parts[1:]
                if marker not in ("cert-authority", "revoked"):
                    continue
            if len(parts) < 3:
                continue
            try:
                key = asyncssh.import_public_key(f"{parts[1]} {parts[2]}")
            except (asyncssh.KeyImportError, ValueError):
                continue
            entries.append(KnownEntry(path, number, marker, parts[0], key))
    return entries


def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c)
                              for c in pattern) + r"\Z", re.IGNORECASE)


def pattern_matches(patterns: str, name: str) -> bool:
    """OpenSSH's known_hosts host field: ``|1|salt|hash``, or comma-separated patterns with
    ``*``/``?`` and ``!`` negation (a negated match vetoes)."""
    if patterns.startswith("|1|"):
        try:
            _, _, salt, digest = patterns.split("|")
            expected = base64.b64decode(digest)
            actual = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
        except (ValueError, TypeError):
            return False
        return hmac.compare_digest(expected, actual)
    matched = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        if _wildcard(pattern[1:] if negated else pattern).match(name):
            if negated:
                return False
            matched = True
    return matched


def known_hosts_line(name: str, key: asyncssh.SSHKey, hashed: bool) -> str:
    if hashed:
        salt = os.urandom(20)
        digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
        name = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    return f"{name} {key.algorithm.decode()} {base64.b64encode(key.public_data).decode()}"


def _describe(key: asyncssh.SSHKey) -> str:
    return f"{key.algorithm.decode()} {key.get_fingerprint('sha256')}"


@dataclass
class HostKeyCheck:
    """The host-key decision for one connection to ``target`` (see the module docstring)."""

    target: SSHTarget
    entries: list[KnownEntry] = field(default_factory=list)
    #: After the handshake: "known", "added", "changed", "unknown" or "" (not reached).
    verdict: str = ""
    offered: asyncssh.SSHKey | None = None
    conflicting: list[KnownEntry] = field(default_factory=list)
    added_to: str = ""

    def __post_init__(self) -> None:
        name = self.target.known_hosts_name
        files = self.target.user_known_hosts + self.target.global_known_hosts
        self.entries = [e for e in read_known_hosts(files) if pattern_matches(e.patterns, name)]

    def known_hosts_arg(self) -> tuple[list[asyncssh.SSHKey], list[asyncssh.SSHKey], list[asyncssh.SSHKey]]:
        """(trusted keys, CA keys, revoked keys) for asyncssh's ``known_hosts``; keys outside
        them reach :meth:`decide` through the client's ``validate_host_public_key``."""

        def pick(marker: str | None) -> list[asyncssh.SSHKey]:
            return [e.key for e in self.entries if e.marker == marker]

        return pick(None), pick("cert-authority"), pick("revoked")

    def decide(self, key: asyncssh.SSHKey) -> bool:
        """A key that is not among the trusted ones: new (maybe accept and record) or changed."""
        self.offered = key
        self.conflicting = [e for e in self.entries
                            if e.marker is None and e.key.algorithm == key.algorithm]
        if self.conflicting:
            self.verdict = "changed"
            return False
        if self.target.strict_host_key_checking in ("yes", "ask"):
            self.verdict = "unknown"
            return False
        self.verdict = "added"
        self._record(key)
        return True

    def _record(self, key: asyncssh.SSHKey) -> None:
        if not self.target.user_known_hosts:
            return
        path = self.target.user_known_hosts[0]
        line = known_hosts_line(self.target.known_hosts_name, key, self.target.hash_known_hosts)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                if f.tell() > 0 and not _ends_with_newline(path):
                    f.write("\n")
                f.write(line + "\n")
        except OSError as exc:
            log.warning("could not add the host key of %s to %s (%s); connecting anyway, as ssh "
                        "does", self.target.known_hosts_name, path, exc.strerror or exc)
            return
        self.added_to = path
        log.warning("permanently added %s (%s) to the list of known hosts in %s (StrictHostKeyChecking %s)",
                    self.target.known_hosts_name, key.algorithm.decode(), path,
                    self.target.strict_host_key_checking)

    def error_text(self, exc: BaseException) -> str:
        """Why the host key was refused: the key, the file(s), the option, and what to do."""
        t = self.target
        name = t.known_hosts_name
        option = f"StrictHostKeyChecking {t.strict_host_key_checking}"
        if self.verdict == "changed" and self.offered is not None:
            where = ", ".join(e.where for e in self.conflicting)
            path = self.conflicting[0].path
            return (f"the SSH host key of {name} has CHANGED: the host sent {_describe(self.offered)}, "
                    f"but {where} holds another {self.offered.algorithm.decode()} key for it. A "
                    "reinstalled host, or someone in between. If the change is expected, remove the "
                    f"old key with `ssh-keygen -f \"{path}\" -R \"{name}\"` and connect again. "
                    f"Refused whatever StrictHostKeyChecking says ({option}, from {t.source}): "
                    "with 'no' OpenSSH would also turn off the port forwarding mwnotebook needs")
        files = " ".join(t.user_known_hosts + t.global_known_hosts) or "(no known-hosts file)"
        if self.verdict == "unknown" and self.offered is not None:
            why = ("mwnotebook cannot ask (OpenSSH's default 'ask' needs a terminal)"
                   if t.strict_host_key_checking == "ask" else "new keys are refused")
            return (f"the SSH host key of {name} ({_describe(self.offered)}) is not in the "
                    f"known-hosts files ({files}), and {option} (from {t.source}): {why}. Check and "
                    f"accept the key once with `ssh {t.alias}`, or set `StrictHostKeyChecking "
                    f"accept-new` for this host in the SSH config")
        return (f"the SSH host key of {name} was refused ({exc}); known-hosts files: {files}; "
                f"{option} (from {t.source})")


def _ends_with_newline(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except OSError:
        return True
