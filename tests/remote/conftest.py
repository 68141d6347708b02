"""Fixtures for tests against real sshd test hosts in network namespaces (see netns_hosts.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed import netns_hosts


@pytest.fixture(scope="session")
def test_net() -> Iterator[netns_hosts.TestNet]:
    """Two SSH test hosts (``mwhost0``, ``mwhost1``); skips with the reason where they can't exist."""
    reason = netns_hosts.unavailable_reason()
    if reason:
        pytest.skip(reason)
    net = netns_hosts.create(2)
    try:
        yield net
    finally:
        net.destroy()


@pytest.fixture
def ssh_home(test_net: netns_hosts.TestNet, monkeypatch: pytest.MonkeyPatch) -> netns_hosts.TestNet:
    """Point HOME at the test home and MWNOTEBOOK_SSH_CONFIG at its ~/.ssh/config, so SSH finds
    the config, the key and known_hosts there as it would a user's; no ssh-agent. Checks afterwards that no test left anything
    running on the hosts."""
    monkeypatch.setenv("HOME", str(test_net.home))
    # OpenSSH reads the passwd home's ~/.ssh/config, not $HOME's: name the test config like `ssh -F`.
    monkeypatch.setenv("MWNOTEBOOK_SSH_CONFIG", str(test_net.ssh_config))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    yield test_net
    left = test_net.wait_no_leftovers(10)
    assert not left, f"processes left running on the test hosts: {left}"
