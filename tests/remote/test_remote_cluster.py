"""The whole product with remote workers: Cluster(hosts=...) across two sshd test hosts
(network namespaces), TensorFlow traffic crossing between them, failure handling and cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mwnotebook import Cluster, ClusterStartError, WorkerDiedError
from mwnotebook.shared.events import Event, WorkerOutput
from testbed import netns_hosts
from testbed.processes import running, wait_gone
from testbed.seed_cell import LONG_RUN, SEED_CELL, expected_line

pytestmark = [pytest.mark.remote, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(400)]

PY = sys.executable


def established_peers(host: netns_hosts.TestHost) -> set[str]:
    """``addr:port`` of the remote ends of the TCP connections established in a host's namespace."""
    out = host.exec("ss", "-tnH", "state", "established").stdout
    peers = set()
    for line in out.splitlines():
        peer = line.split()[-1]
        addr, _, port = peer.rpartition(":")
        peers.add(f"{addr.strip('[]').removeprefix('::ffff:')}:{port}")
    return peers


def test_seed_runs_across_two_hosts(ssh_home: netns_hosts.TestNet) -> None:
    h0, h1 = ssh_home.hosts
    with Cluster(hosts=(h0.alias, h1.alias), cpu=True) as cluster:
        cluster.start()
        # Each worker's gRPC port was chosen on its own host; the cluster list uses the addresses
        # the hosts were reached at.
        workers = cluster.tf_configs[0]["cluster"]["worker"]
        assert [w.rsplit(":", 1)[0] for w in workers] == [h0.address, h1.address]
        assert [c["cluster"]["worker"] for c in cluster.tf_configs] == [workers, workers]
        status = cluster.status()
        assert [s.host for s in status] == [h0.alias, h1.alias]
        for info, host in zip(status, (h0, h1)):
            assert info.alive and info.pid in netns_hosts.ns_pids(host.netns)

        result = cluster.run(SEED_CELL, timeout=300)
        for i in range(2):
            assert expected_line(i) in result.stdout(i).splitlines(), result.stdout(i)[-2000:]
        # The collectives went over the bridge between the two namespaces: TF's channels from one
        # host to the other's gRPC server are still open.
        assert workers[1] in established_peers(h0) or workers[0] in established_peers(h1)

        # %mwcluster restart: fresh kernels on the same hosts, same TF_CONFIGs.
        cluster.restart()
        restarted = cluster.status()
        assert cluster.tf_configs[0]["cluster"]["worker"] == workers
        for old, new, host in zip(status, restarted, (h0, h1)):
            assert new.pid != old.pid and new.pid in netns_hosts.ns_pids(host.netns)
            assert not running(old.pid)
        again = cluster.run("print('again', flush=True)")
        assert [again.stdout(i).strip() for i in range(2)] == ["again", "again"]
        pids = {s.pid for s in restarted}
    for pid in pids:
        assert wait_gone(pid)
    # ssh_home checks that neither host runs anything but its sshd any more.


def test_start_error_names_the_host_and_leaves_nothing(ssh_home: netns_hosts.TestNet) -> None:
    h0, h1 = ssh_home.hosts
    cluster = Cluster(hosts=(h0.alias, f"nosuchuser@{h1.alias}"), cpu=True)
    started = time.monotonic()
    with pytest.raises(ClusterStartError) as info:
        cluster.start()
    assert time.monotonic() - started < 15  # hang bound: a refused login is reported, not waited out
    assert info.value.host == f"nosuchuser@{h1.alias}"
    assert f"nosuchuser@{h1.alias}" in str(info.value) and "authentication" in str(info.value)
    assert not cluster.started
    # ssh_home checks that nothing was left on mwhost0 (its port holder, its spare agent).




def test_killed_remote_kernel_fails_the_run_and_cleans_up(ssh_home: netns_hosts.TestNet) -> None:
    h0, h1 = ssh_home.hosts
    with Cluster(hosts=(h0.alias, h1.alias), cpu=True) as cluster:
        cluster.start()
        before = [s.pid for s in cluster.status()]
        killed_at: list[float] = []

        def kill_worker_1_once_training(event: Event) -> None:
            if (isinstance(event, WorkerOutput) and event.worker == 1 and not killed_at
                    and "training" in event.content.get("text", "")):
                os.kill(before[1], signal.SIGKILL)  # the kernel dies on its host, mid-run
                killed_at.append(time.monotonic())

        with pytest.raises(WorkerDiedError) as info:
            cluster.run(LONG_RUN, on_event=kill_worker_1_once_training, timeout=300)
        reported = time.monotonic()
        assert killed_at, "worker 1 never reached the training loop"
        assert reported - killed_at[0] < 30
        error = info.value
        assert error.worker == 1
        assert error.failures[0].kind == "died"
        assert "SIGKILL" in error.failures[0].exit_description
        assert error.restarted

        # The group was restarted on the same hosts: fresh kernels, nothing of the old ones left.
        cluster.start()  # the restart runs in the background; this waits for it
        status = cluster.status()
        assert all(s.alive for s in status)
        assert [s.host for s in status] == [h0.alias, h1.alias]
        for old, info_, host in zip(before, status, (h0, h1)):
            assert info_.pid != old and not running(old)
            assert info_.pid in netns_hosts.ns_pids(host.netns)
        result = cluster.run(SEED_CELL, timeout=300)
        for i in range(2):
            assert expected_line(i) in result.stdout(i).splitlines(), result.stdout(i)[-2000:]
    # ssh_home checks that neither host runs anything but its sshd after stop.


def test_notebook_process_killed_leaves_nothing_on_the_hosts(ssh_home: netns_hosts.TestNet) -> None:
    """The notebook's own process dies (kill -9): its SSH connections drop, and every remote
    worker and port holder ends by itself."""
    h0, h1 = ssh_home.hosts
    script = (
        "import sys, time\n"
        "from mwnotebook import Cluster\n"
        f"c = Cluster(hosts=({h0.alias!r}, {h1.alias!r}), cpu=True)\n"
        "c.start()\n"
        "print(' '.join(str(s.pid) for s in c.status()), flush=True)\n"
        "print(' '.join(str(t.pid) for t in c.launcher.templates), flush=True)\n"
        "time.sleep(600)\n"
    )
    root = Path(__file__).resolve().parents[2]
    notebook = subprocess.Popen([PY, "-c", script], stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        pids = [int(p) for p in notebook.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(pids) == 2, "the cluster did not start"
        assert pids[0] in netns_hosts.ns_pids(h0.netns) and pids[1] in netns_hosts.ns_pids(h1.netns)
        templates = [int(p) for p in notebook.stdout.readline().split()]  # type: ignore[union-attr]
        # Forked, each by its own host's template (the templates are listed in the order they started).
        assert sorted(netns_hosts.parent_pid(pid) for pid in pids) == sorted(templates) and len(set(templates)) == 2
    finally:
        notebook.kill()
        notebook.wait(timeout=10)
    left = ssh_home.wait_no_leftovers(15)
    assert not left, f"left running after the notebook process died: {left}"
