"""A cluster on two SSH test hosts publishes its remote workers, obeys the control channel, and an
owner killed with SIGKILL leaves nothing running on the hosts (the agents end with their channels)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mwnotebook import Cluster
from mwnotebook.registry import control, orphans, state
from testbed import netns_hosts
from tests._shared.waits import wait_for

pytestmark = pytest.mark.remote



def published(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p, d in state.read_all(directory) if d["workers"] and all(w["pid"] for w in d["workers"])]


def test_remote_workers_are_published_and_stopped_through_the_channel(
        ssh_home: netns_hosts.TestNet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "rt"))
    directory = tmp_path / "rt" / "mwnotebook"
    h0, h1 = ssh_home.hosts
    cluster = Cluster(hosts=(h0.alias, h1.alias), cpu=True)
    try:
        cluster.start()
        _, doc = wait_for(lambda: published(directory), 60)[0]
        assert doc["engine"] == "ssh" and doc["hosts"] == sorted([h0.alias, h1.alias])
        assert [w["host"] for w in doc["workers"]] == [h0.alias, h1.alias]
        assert not any(w["local"] for w in doc["workers"])  # never signalled from here
        for worker, host in zip(doc["workers"], (h0, h1)):
            assert worker["pid"] in netns_hosts.ns_pids(host.netns)
        assert [w["tf_config"] for w in doc["workers"]] == cluster.tf_configs
        control.send(doc["control"], "stop")
        wait_for(lambda: not cluster.started and os.listdir(directory) == [], 60)
    finally:
        cluster.stop()
    # ssh_home checks that neither host runs anything but its sshd any more


OWNER = textwrap.dedent("""
    import sys, time
    from mwnotebook import Cluster
    c = Cluster(hosts=tuple(sys.argv[1:]), cpu=True)
    c.start()
    print("started", flush=True)
    time.sleep(600)
""")


def test_a_killed_owners_remote_cluster_leaves_nothing_on_the_hosts(
        ssh_home: netns_hosts.TestNet, tmp_path: Path) -> None:
    directory = tmp_path / "rt" / "mwnotebook"
    h0, h1 = ssh_home.hosts
    owner = subprocess.Popen([sys.executable, "-c", OWNER, h0.alias, h1.alias], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")})
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "started"
        path, doc = wait_for(lambda: published(directory), 60)[0]
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        shown = orphans.sweep_one(path, doc)
        assert shown is not None and shown["state"] == "orphaned" and shown["cleanup"] == []
        assert ssh_home.wait_no_leftovers(30) == {}
        wait_for(lambda: orphans.sweep_one(path, state.read_state(path) or doc) is None, 15)
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
