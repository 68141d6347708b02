"""Pure parts of the OpenSSH emulation: ``ssh -G`` output (recorded from OpenSSH 9.2), token
expansion, known_hosts matching and writing, ProxyJump hops, and the fallback parser compared
with ``ssh -G`` itself. No root, no network."""

from __future__ import annotations

import asyncio
import base64
import getpass
import os
import shutil
from pathlib import Path

import asyncssh
import pytest

from mwnotebook.launchers.ssh.config import (
    expand_tokens,
    home_directory,
    parse_ssh_g,
    resolve_target,
    target_from_options,
)
from mwnotebook.launchers.ssh.config_fallback import fallback_options
from mwnotebook.launchers.ssh.connect import _split_hop
from mwnotebook.launchers.ssh.known_hosts import (
    HostKeyCheck,
    known_hosts_line,
    pattern_matches,
    read_known_hosts,
)

# Recorded: `ssh -F cfg -G foo` (OpenSSH_9.2p1), lines irrelevant here removed.
RECORDED = """\
host foo
user alice
hostname 10.1.2.3
port 2222
hashknownhosts no
identitiesonly no
stricthostkeychecking accept-new
serveralivecountmax 3
serveraliveinterval 0
identityfile ~/.ssh/id_test
identityfile /tmp/%h_%r_key
globalknownhostsfile /etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2
userknownhostsfile /root/kh1 /tmp/kh_10.1.2.3_2222
connecttimeout none
proxyjump bob@jump:23,jump2
"""

CONFIG = """\
Host foo
  HostName 10.1.2.3
  User alice
  Port 2222
  IdentityFile ~/.ssh/id_test
  IdentityFile /tmp/%h_%r_key
  UserKnownHostsFile /tmp/kh1 /tmp/kh_%h_%p
  StrictHostKeyChecking accept-new
  HashKnownHosts yes
  ProxyJump bob@jump:23,jump2
Host bar
  StrictHostKeyChecking off
  UserKnownHostsFile /dev/null
  ConnectTimeout 7
"""


def test_recorded_ssh_g_output() -> None:
    options = parse_ssh_g(RECORDED)
    assert options["identityfile"] == ("~/.ssh/id_test", "/tmp/%h_%r_key")
    target = target_from_options("foo", options, "ssh -G foo")
    assert (target.hostname, target.user, target.port) == ("10.1.2.3", "alice", 2222)
    assert target.identity_files == (f"{home_directory()}/.ssh/id_test", "/tmp/10.1.2.3_alice_key")
    assert target.user_known_hosts == ("/root/kh1", "/tmp/kh_10.1.2.3_2222")
    assert target.strict_host_key_checking == "accept-new"
    assert target.proxy_jump == "bob@jump:23,jump2"
    assert target.connect_timeout is None and not target.hash_known_hosts
    assert target.known_hosts_name == "[10.1.2.3]:2222"


@pytest.mark.parametrize("printed,policy", [("true", "yes"), ("false", "no"), ("ask", "ask"),
                                            ("accept-new", "accept-new")])
def test_strict_host_key_checking_as_ssh_g_prints_it(printed: str, policy: str) -> None:
    target = target_from_options("h", {"stricthostkeychecking": (printed,)}, "test")
    assert target.strict_host_key_checking == policy


def test_tokens() -> None:
    target = target_from_options("alias", parse_ssh_g("hostname h.example\nuser u\nport 22\n"), "t")
    assert expand_tokens("~/k_%h_%r_%p_%n_%%", target) == f"{home_directory()}/k_h.example_u_22_alias_%"
    assert expand_tokens("%d/x_%u", target) == f"{home_directory()}/x_{getpass.getuser()}"
    os.environ["MW_TOKEN_TEST"] = "v"
    assert expand_tokens("/a/${MW_TOKEN_TEST}", target) == "/a/v"
    assert target.known_hosts_name == "h.example"


def test_proxy_jump_hops() -> None:
    assert _split_hop("bob@jump:23") == ("jump", "bob", 23)
    assert _split_hop("jump2") == ("jump2", None, None)
    assert _split_hop("ssh://carol@[fe80::1]:2200") == ("fe80::1", "carol", 2200)


def test_known_hosts_patterns_and_hashes() -> None:
    assert pattern_matches("a.example,10.0.0.1", "10.0.0.1")
    assert pattern_matches("*.example", "B.EXAMPLE")
    assert not pattern_matches("*.example,!bad.example", "bad.example")
    assert pattern_matches("[h]:2222", "[h]:2222") and not pattern_matches("h", "[h]:2222")
    key = asyncssh.generate_private_key("ssh-ed25519")
    hashed = known_hosts_line("[h]:2222", key, hashed=True)
    assert hashed.startswith("|1|") and pattern_matches(hashed.split()[0], "[h]:2222")
    assert not pattern_matches(hashed.split()[0], "h")
    plain = known_hosts_line("h", key, hashed=False)
    assert plain == f"h ssh-ed25519 {base64.b64encode(key.public_data).decode()}"


def test_known_hosts_files_missing_bad_lines_and_markers(tmp_path: Path) -> None:
    key, other = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    good = tmp_path / "kh"
    good.write_text("# comment\nnot a valid line\n"
                    + known_hosts_line("h", key, False) + "\n@revoked "
                    + known_hosts_line("h", other, False) + "\n")
    entries = read_known_hosts((str(tmp_path / "missing"), str(good), "/dev/null"))
    assert [(e.line, e.marker) for e in entries] == [(3, None), (4, "revoked")]
    target = target_from_options("h", {"hostname": ("h",), "userknownhostsfile": (
        f"{tmp_path}/missing {good}",), "globalknownhostsfile": ("/dev/null",)}, "t")
    trusted, cas, revoked = HostKeyCheck(target).known_hosts_arg()
    assert trusted == [entries[0].key] and cas == [] and revoked == [entries[1].key]


def test_new_key_policy_writes_first_file_with_ssh_mode(tmp_path: Path) -> None:
    key, changed = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    first, second = tmp_path / "first", tmp_path / "second"
    options = {"hostname": ("h",), "userknownhostsfile": (f"{first} {second}",)}
    ecdsa = asyncssh.generate_private_key("ecdsa-sha2-nistp256")  # a new type once ed25519 is known
    for policy, offered, accepted in (("true", key, False), ("ask", key, False),
                                      ("accept-new", key, True), ("false", ecdsa, True)):
        target = target_from_options("h", {**options, "stricthostkeychecking": (policy,)}, "t")
        check = HostKeyCheck(target)
        assert check.decide(offered) is accepted
        assert check.verdict == ("added" if accepted else "unknown")
    umask = os.umask(0)
    os.umask(umask)
    assert first.stat().st_mode & 0o777 == 0o666 & ~umask and not second.exists()
    assert first.read_text().count("\n") == 2
    # A key of the same type that differs: refused for every policy, naming file and line.
    check = HostKeyCheck(target_from_options("h", {**options, "stricthostkeychecking": ("false",)}, "t"))
    assert check.decide(changed) is False and check.verdict == "changed"
    assert f"{first}:1" in check.error_text(Exception())


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh command to compare with")
@pytest.mark.parametrize("host,user,port", [("foo", None, None), ("bar", "zed", 99)])
def test_fallback_parser_agrees_with_ssh_g(tmp_path: Path, host: str, user: str | None,
                                           port: int | None) -> None:
    config = tmp_path / "config"
    config.write_text(CONFIG)
    by_ssh = asyncio.run(resolve_target(host, user, port, str(config)))
    fallback = target_from_options(host, fallback_options(str(config), host, user, port),
                                   "fallback", known_hosts_expanded=False)
    for name in ("hostname", "user", "port", "identity_files", "user_known_hosts",
                 "strict_host_key_checking", "hash_known_hosts", "proxy_jump", "connect_timeout"):
        assert getattr(fallback, name) == getattr(by_ssh, name), name
