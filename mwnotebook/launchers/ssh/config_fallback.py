"""Read an OpenSSH client config with asyncssh's parser when the ``ssh`` command is missing.

Returns the same shape as ``ssh -G`` output (see ``ssh_config.parse_ssh_g``), filled with OpenSSH's
defaults where the file says nothing. asyncssh's parser skips ``StrictHostKeyChecking`` and
``HashKnownHosts``; a small subclass adds them. ``asyncssh.config`` is not a public API, hence this
separate module.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import Any

from asyncssh.config import SSHClientConfig, SSHConfig

_DEFAULT_IDENTITIES = ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk",
                       "id_xmss", "id_dsa")


class _FullerClientConfig(SSHClientConfig):
    # asyncssh's config parser has no public way to learn two more options: extend its own
    # (private) handler table with its own string setter.
    _handlers = dict(SSHClientConfig._handlers)  # noqa: SLF001
    _handlers["stricthostkeychecking"] = ("StrictHostKeyChecking", SSHConfig._set_string)  # noqa: SLF001
    _handlers["hashknownhosts"] = ("HashKnownHosts", SSHConfig._set_string)  # noqa: SLF001


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def fallback_options(path: str, host: str, user: str | None, port: int | None) -> dict[str, tuple[str, ...]]:
    paths = [Path(path)] if os.access(path, os.R_OK) else []
    config = _FullerClientConfig.load(None, paths, False, False, False, getpass.getuser(), user or (),
                                      host, port or ())
    def get(option: str) -> Any:
        return config.get(option)

    home = os.path.expanduser("~")
    options: dict[str, tuple[str, ...]] = {
        "hostname": (str(get("Hostname") or host).lower(),),
        "user": (user or str(get("User") or getpass.getuser()),),
        "port": (str(port or get("Port") or 22),),
        "stricthostkeychecking": (str(get("StrictHostKeyChecking") or "ask"),),
        "hashknownhosts": (_text(get("HashKnownHosts") or "no"),),
        "identitiesonly": (_text(get("IdentitiesOnly") or False),),
        "userknownhostsfile": tuple(os.path.expanduser(p) for p in (
            get("UserKnownHostsFile") or [f"{home}/.ssh/known_hosts", f"{home}/.ssh/known_hosts2"])),
        "globalknownhostsfile": tuple(get("GlobalKnownHostsFile") or
                                      ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"]),
        "identityfile": tuple(get("IdentityFile") or [f"~/.ssh/{n}" for n in _DEFAULT_IDENTITIES]),
        "connecttimeout": (str(get("ConnectTimeout") or "none"),),
        "serveraliveinterval": (str(get("ServerAliveInterval") or 0),),
    }
    for option in ("HostKeyAlias", "ProxyJump", "ProxyCommand", "IdentityAgent", "BindAddress"):
        if get(option):
            options[option.lower()] = (str(get(option)),)
    if get("CertificateFile"):
        options["certificatefile"] = tuple(get("CertificateFile"))
    return options
