"""The SSH test hosts of tests/remote (tests/_shared/netns_hosts.py), for the panel's remote tests."""

from tests.remote.conftest import ssh_home, test_net

__all__ = ["ssh_home", "test_net"]
