"""mwnotebook's SSH connections against OpenSSH's own behaviour, case by case, on the sshd test
hosts: for each SSH config, ``ssh -F CONFIG HOST true`` and ``open_connection`` must both succeed or
both fail, leave the same known-hosts files behind (created or not, same mode, same key), and land
as the same user on the same host (through the same jump host)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mwnotebook.config.hosts import HostSpec
from mwnotebook.launchers.ssh.connect import SSHConnectError, open_connection
from testbed import netns_hosts

pytestmark = [pytest.mark.remote, pytest.mark.integration, pytest.mark.timeout(120)]


@dataclass
class Case:
    options: list[str]  #: lines of the "Host case" block; {d} = the case's own directory
    files: dict[str, str] = field(default_factory=dict)  #: initial files in {d}: "known", "wrong", ""
    user: str | None = None
    port: int | None = None
    ok: bool = True
    error: str = ""  #: regex our error must match ({d} substituted)


CASES = {
    "no_missing_file": Case(["StrictHostKeyChecking no", "UserKnownHostsFile {d}/kh"]),
    "no_missing_dir": Case(["StrictHostKeyChecking no", "UserKnownHostsFile {d}/sub/kh"]),
    "off_dev_null": Case(["StrictHostKeyChecking off", "UserKnownHostsFile /dev/null"]),
    "accept_new_empty": Case(["StrictHostKeyChecking accept-new", "UserKnownHostsFile {d}/kh"],
                             {"kh": ""}),
    "accept_new_hashed": Case(["StrictHostKeyChecking accept-new", "HashKnownHosts yes",
                               "UserKnownHostsFile {d}/kh"]),
    "yes_unknown": Case(["StrictHostKeyChecking yes", "UserKnownHostsFile {d}/kh"], {"kh": ""},
                        ok=False, error=r"not in the known-hosts files \({d}/kh .*StrictHostKeyChecking yes"),
    "ask_unknown": Case(["UserKnownHostsFile {d}/kh"], ok=False,
                        error=r"StrictHostKeyChecking ask .*cannot ask"),
    "yes_second_file_known": Case(["StrictHostKeyChecking yes",
                                   "UserKnownHostsFile {d}/missing {d}/kh2"], {"kh2": "known"}),
    "changed_accept_new": Case(["StrictHostKeyChecking accept-new", "UserKnownHostsFile {d}/kh"],
                               {"kh": "wrong"}, ok=False, error=r"CHANGED.*{d}/kh:1"),
    "changed_yes": Case(["StrictHostKeyChecking yes", "UserKnownHostsFile {d}/kh"],
                        {"kh": "wrong"}, ok=False, error=r"CHANGED.*{d}/kh:1"),
    "proxy_jump": Case(["ProxyJump root@{h0}", "StrictHostKeyChecking yes",
                        "UserKnownHostsFile {d}/kh"], {"kh": "known"}),
    "identity_file_tokens": Case(["IdentityFile {d}/key_%h_%r", "IdentitiesOnly yes",
                                  "UserKnownHostsFile {d}/kh"], {"kh": "known"}),
    "identity_file_missing": Case(["IdentityFile {d}/nokey", "IdentitiesOnly yes",
                                   "UserKnownHostsFile {d}/kh"], {"kh": "known"}, ok=False,
                                  error=r"IdentityFile: {d}/nokey: not found"),
    "identity_file_missing_then_good": Case(["IdentityFile {d}/nokey", "IdentityFile {d}/key_%h_%r",
                                             "UserKnownHostsFile {d}/kh"], {"kh": "known"}),
    "port_from_config": Case(["Port 2222", "UserKnownHostsFile {d}/kh"], {"kh": "known"},
                             ok=False, error=r"refused"),
    "port_overridden": Case(["Port 2222", "UserKnownHostsFile {d}/kh"], {"kh": "known"}, port=22),
    "user_from_config": Case(["User nosuchuser", "UserKnownHostsFile {d}/kh"], {"kh": "known"},
                             ok=False, error=r"authentication as 'nosuchuser'"),
    "user_overridden": Case(["User nosuchuser", "UserKnownHostsFile {d}/kh"], {"kh": "known"},
                            user="root"),
}


def _pub(path: Path) -> str:
    return " ".join(path.read_text().split()[:2])


def _prepare(net: netns_hosts.TestNet, case: Case, d: Path) -> Path:
    """The case's directory ``d`` with its files and its SSH config; returns the config path."""
    h0, h1 = net.hosts
    keys = net.root / "keys"
    d.mkdir()
    entries = {
        "known": f"{h1.address} {_pub(keys / 'host1_ed25519.pub')}\n"
                 f"{h0.address} {_pub(keys / 'host0_ed25519.pub')}\n",
        "wrong": f"{h1.address} {_pub(keys / 'impostor_ed25519.pub')}\n",
        "": "",
    }
    for name, content in case.files.items():
        (d / name).write_text(entries[content])
    identity = net.home / ".ssh" / "id_ed25519"
    shutil.copy(identity, d / f"key_{h1.address}_root")
    lines = ["Host case", f"    HostName {h1.address}"]
    lines += ["    " + o.format(d=d, h0=h0.address) for o in case.options]
    lines += ["", "Host *", "    User root", f"    UserKnownHostsFile {d}/kh", ""]
    if not any(o.startswith("IdentityFile") for o in case.options):
        lines.insert(-1, f"    IdentityFile {identity}")  # IdentityFile lines add up over blocks
    config = d / "config"
    config.write_text("\n".join(lines))
    return config


def _state(d: Path) -> dict[str, tuple[int, list[str]]]:
    """Known-hosts files left in ``d``: mode and the key part of each line."""
    out = {}
    for path in sorted(d.rglob("*")):
        if path.is_file() and path.name != "config" and not path.name.startswith("key_"):
            lines = [" ".join(line.split()[1:]) for line in path.read_text().splitlines() if line]
            out[str(path.relative_to(d))] = (stat.S_IMODE(path.stat().st_mode), lines)
    return out


def _openssh(config: Path, case: Case, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-F", str(config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", *extra]
    argv += (["-l", case.user] if case.user else []) + (["-p", str(case.port)] if case.port else [])
    return subprocess.run(argv + ["case", "echo $SSH_CONNECTION; whoami"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


async def _ours(config: Path, case: Case) -> tuple[bool, str]:
    spec = HostSpec("case", user=case.user, port=case.port)
    try:
        session = await open_connection(spec, connect_timeout=10, keepalive_interval=2,
                                        keepalive_count_max=3, ssh_config=str(config))
    except SSHConnectError as exc:
        return False, str(exc)
    try:
        result = await session.conn.run("echo $SSH_CONNECTION; whoami", check=False)
        return True, str(result.stdout)
    finally:
        session.close()
        await session.wait_closed()


def _landed(output: str) -> tuple[str, str, str]:
    """(client address, server port, remote user) from ``echo $SSH_CONNECTION; whoami``."""
    connection, user = output.strip().splitlines()
    client, _, _, server_port = connection.split()
    return client, server_port, user


@pytest.mark.parametrize("name", list(CASES))
def test_same_outcome_as_openssh(name: str, ssh_home: netns_hosts.TestNet, tmp_path: Path) -> None:
    case = CASES[name]
    theirs_dir, ours_dir = tmp_path / "openssh", tmp_path / "mwnotebook"
    theirs = _openssh(_prepare(ssh_home, case, theirs_dir), case)
    ok, detail = asyncio.run(_ours(_prepare(ssh_home, case, ours_dir), case))

    assert (theirs.returncode == 0) == case.ok, f"OpenSSH itself: {theirs.stderr}"
    assert ok == case.ok, detail
    if ok:
        assert _landed(detail) == _landed(theirs.stdout)
    else:
        assert re.search(case.error.format(d=ours_dir), detail, re.S), detail
    # The same known-hosts files exist afterwards, with the same modes and the same keys.
    assert _state(ours_dir) == _state(theirs_dir)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_jump_host_is_really_used(ssh_home: netns_hosts.TestNet, tmp_path: Path) -> None:
    ok, output = asyncio.run(_ours(_prepare(ssh_home, CASES["proxy_jump"], tmp_path / "d"),
                                   CASES["proxy_jump"]))
    assert ok, output
    assert _landed(output)[0] == ssh_home.hosts[0].address  # h1 saw the connection come from h0


def test_key_added_by_accept_new_satisfies_openssh(ssh_home: netns_hosts.TestNet, tmp_path: Path) -> None:
    """What accept-new wrote (hashed) is a known_hosts entry OpenSSH's strict checking accepts."""
    case = CASES["accept_new_hashed"]
    d = tmp_path / "d"
    ok, detail = asyncio.run(_ours(_prepare(ssh_home, case, d), case))
    assert ok, detail
    assert (d / "kh").read_text().startswith("|1|")
    strict = Case(["StrictHostKeyChecking yes", f"UserKnownHostsFile {d}/kh"])
    config = tmp_path / "strict_config"
    config.write_text((d / "config").read_text().replace("StrictHostKeyChecking accept-new",
                                                         "StrictHostKeyChecking yes"))
    assert _openssh(config, strict).returncode == 0


def test_changed_key_with_checking_off_is_refused_like_openssh_forwarding(
        ssh_home: netns_hosts.TestNet, tmp_path: Path) -> None:
    """OpenSSH with ``StrictHostKeyChecking no`` and a changed key connects but disables port
    forwarding; mwnotebook needs forwarding, so it refuses, and says why."""
    case = Case(["StrictHostKeyChecking no", "UserKnownHostsFile {d}/kh"], {"kh": "wrong"})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    theirs = _openssh(_prepare(ssh_home, case, tmp_path / "openssh"), case,
                      "-L", f"127.0.0.1:{port}:127.0.0.1:22")
    assert "Port forwarding is disabled" in theirs.stderr, theirs.stderr
    ok, detail = asyncio.run(_ours(_prepare(ssh_home, case, tmp_path / "ours"), case))
    assert not ok
    assert "CHANGED" in detail and "port forwarding" in detail and "StrictHostKeyChecking no" in detail
