"""--hosts parsing, worker placement and --tf-address (no SSH, no kernels)."""

from __future__ import annotations

import pytest

from mwnotebook.config.hosts import HostSpec, parse_host, parse_hosts, parse_tf_address, worker_hosts
from mwnotebook.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a", HostSpec("a")),
        ("alice@gpu1", HostSpec("gpu1", user="alice")),
        ("gpu1:2222", HostSpec("gpu1", port=2222)),
        ("gpu1*2", HostSpec("gpu1", slots=2)),
        ("alice@gpu1.example.org:2222*4", HostSpec("gpu1.example.org", "alice", 2222, 4)),
        ("10.0.0.7", HostSpec("10.0.0.7")),
        ("[fe80::1]", HostSpec("fe80::1")),
        ("bob@[2001:db8::5]:22*3", HostSpec("2001:db8::5", "bob", 22, 3)),
        ("  spaced  ", HostSpec("spaced")),
    ],
)
def test_parse_host(text: str, expected: HostSpec) -> None:
    assert parse_host(text) == expected


@pytest.mark.parametrize(
    "text", ["", "a b", "@host", "user@", "host:", "host:0", "host:70000", "host*0", "host*",
             "host*2*2", "a@b@c", "fe80::1", "[fe80::1", "host:22:33"],
)
def test_parse_host_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="host"):
        parse_host(text)


def test_target_round_trips() -> None:
    for text in ["a", "alice@gpu1", "gpu1:2222", "bob@[2001:db8::5]:22"]:
        assert parse_host(text).target == text
        assert parse_host(parse_host(text).target) == parse_host(text)


def test_parse_hosts_accepts_commas_and_sequences() -> None:
    assert parse_hosts("a,b*2") == [HostSpec("a", slots=1), HostSpec("b", slots=2)]
    assert parse_hosts(["a", "b*2, c"]) == [HostSpec("a", slots=1), HostSpec("b", slots=2),
                                           HostSpec("c", slots=1)]
    with pytest.raises(ConfigError):
        parse_hosts("")
    with pytest.raises(ConfigError):
        parse_hosts([])
    with pytest.raises(ConfigError):
        parse_hosts(" , ")


def test_workers_per_host_fills_entries_without_count() -> None:
    assert [s.slots for s in parse_hosts("a,b*3", workers_per_host=2)] == [2, 3]
    with pytest.raises(ConfigError, match="workers-per-host"):
        parse_hosts("a", workers_per_host=0)


def test_worker_placement_is_host_by_host() -> None:
    placement = worker_hosts("a*2,u@b", workers=3)
    assert [s.target for s in placement] == ["a", "a", "u@b"]
    assert placement[0].key == placement[1].key != placement[2].key
    assert [s.host for s in worker_hosts(["a", "b"], workers_per_host=2)] == ["a", "a", "b", "b"]


def test_worker_count_must_match_slots() -> None:
    assert len(worker_hosts("a,b", workers=None)) == 2
    with pytest.raises(ConfigError, match="3 workers requested but --hosts a\\*1,b\\*1 has 2"):
        worker_hosts("a,b", workers=3)


def test_tf_address_override() -> None:
    one = worker_hosts("u@gpu1:2222*2")
    assert parse_tf_address(None, one) == {}
    assert parse_tf_address("10.1.1.1", one) == {"u@gpu1:2222": "10.1.1.1"}
    two = worker_hosts("a,u@b:2200")
    assert parse_tf_address("a=10.0.0.1, b=10.0.0.2", two) == {"a": "10.0.0.1",
                                                               "u@b:2200": "10.0.0.2"}
    with pytest.raises(ConfigError, match="several hosts"):
        parse_tf_address("10.0.0.1", two)
    with pytest.raises(ConfigError, match="not one of the --hosts"):
        parse_tf_address("c=10.0.0.3", two)


def test_launcher_from_spec_places_workers_without_connecting() -> None:
    import sys

    from mwnotebook.config.spec import ClusterSpec
    from mwnotebook.launchers import make_launcher
    from mwnotebook.launchers.ssh.launcher import SSHLauncher

    launcher = make_launcher(ClusterSpec(workers=3, hosts=("a", "u@b:2222*2"), tf_address="b=10.0.0.2"))
    assert isinstance(launcher, SSHLauncher)
    assert [s.target for s in launcher.placement] == ["a", "u@b:2222", "u@b:2222"]
    assert launcher.python == sys.executable  # default: the notebook's interpreter path
    assert launcher.tf_override == {"u@b:2222": "10.0.0.2"}
    assert SSHLauncher.from_spec(ClusterSpec(hosts=("a",), workers=1, python="/opt/py")).python == "/opt/py"
    with pytest.raises(ConfigError, match="2 workers requested"):
        SSHLauncher.from_spec(ClusterSpec(workers=2, hosts=("a*3",)))
