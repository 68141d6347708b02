"""Slurm workers from a notebook off the cluster's network (``--slurm-login``), and Ctrl-C while a job
is pending, on the real test Slurm of slurm_cluster.py.

For the login-node tests the notebook (this process, in the root namespace) cannot reach the nodes:
blackhole routes to their addresses (``nodes_unreachable``); it reaches only the login host, which
runs slurmctld and an sshd. ``SLURM_CONF`` is removed from this process, so a Slurm command run here
instead of on the login node would fail. The ``slurm_env`` fixture checks after every test that no
job and no process on the nodes or the login host (srun, reaper, sshd sessions) is left.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mwnotebook import Cluster
from mwnotebook.launchers.slurm import job as slurm_job
from testbed import slurm_cluster
from testbed.processes import running
from testbed.seed_cell import SEED_CELL, expected_line

from .faults import kill_worker_mid_run

pytestmark = [pytest.mark.slurm, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def laptop(slurm_env: slurm_cluster.SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> slurm_cluster.SlurmCluster:
    """This process as a laptop: the test hosts' SSH config and key, no Slurm configuration, and no
    route to the nodes (only to the login host)."""
    net = slurm_env.net
    monkeypatch.setenv("HOME", str(net.home))
    monkeypatch.setenv("MWNOTEBOOK_SSH_CONFIG", str(net.ssh_config))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("SLURM_CONF")
    with slurm_env.nodes_unreachable():
        for host in slurm_env.nodes:
            with pytest.raises(OSError):
                socket.create_connection((host.address, 22), timeout=3).close()
        socket.create_connection((slurm_env.login.address, 22), timeout=3).close()
        yield slurm_env


def test_seed_and_a_killed_kernel_through_the_login_node(laptop: slurm_cluster.SlurmCluster) -> None:
    n0, n1 = laptop.nodes
    with Cluster(slurm="-N 2", slurm_login=laptop.login.alias, cpu=True) as cluster:
        cluster.start()
        jobs = laptop.jobs()
        assert len(jobs) == 1, jobs
        # TF_CONFIG names the nodes' own addresses (the workers reach each other directly) ...
        workers = cluster.tf_configs[0]["cluster"]["worker"]
        assert [w.rsplit(":", 1)[0] for w in workers] == [n0.address, n1.address]
        status = cluster.status()
        assert [s.host for s in status] == laptop.node_names
        for info, host in zip(status, (n0, n1)):
            assert info.alive and info.pid in slurm_cluster.netns_hosts.ns_pids(host.netns)
        # ... while every Slurm command and every srun runs on the login host.
        login_commands = slurm_cluster.netns_hosts.describe_pids(
            slurm_cluster.netns_hosts.ns_pids(laptop.login.netns))
        assert sum(" srun " in f" {c} " for c in login_commands) >= 2, login_commands
        assert any("mwnotebook-slurm-reaper" in c for c in login_commands), login_commands

        # A node's kernel is killed mid-run: named, the group restarted in the same allocation.
        before = [s.pid for s in status]
        kill_worker_mid_run(cluster, before[1], worker=1)
        cluster.start()
        assert laptop.jobs() == jobs
        for old, new in zip(before, cluster.status()):
            assert new.alive and new.pid != old

        result = cluster.run(SEED_CELL, timeout=300)
        for i in range(2):
            assert expected_line(i) in result.stdout(i).splitlines(), result.stdout(i)[-2000:]


def test_killed_notebook_behind_the_login_node_leaves_nothing(laptop: slurm_cluster.SlurmCluster) -> None:
    """The notebook dies: its SSH connections close, and on the login host the reaper cancels the
    job and the srun agents end their kernels; nothing is left on the nodes or the login host."""
    slurm_cluster.start_and_kill_a_notebook(laptop, f"slurm='-N 2', workers=2, slurm_login={laptop.login.alias!r}")
    left = laptop.wait_no_leftovers(20)
    assert not left, f"left after the notebook process died: {left}"


@pytest.mark.parametrize("via", ["here", "login"])
def test_ctrl_c_while_pending_cancels_the_job_at_once(slurm_env: slurm_cluster.SlurmCluster, via: str,
                                                      request: pytest.FixtureRequest,
                                                      caplog: pytest.LogCaptureFixture, ctrl_c_raises: None) -> None:
    """Ctrl-C while salloc waits (here, or on the login node over SSH): the job is withdrawn at once."""
    login = request.getfixturevalue("laptop").login.alias if via == "login" else None
    busy = slurm_env.run("salloc", "--no-shell", "-N", "2", "--exclusive")
    blocker = busy.stderr.split("allocation")[-1].split()[0]
    timeout = 300.0
    try:
        cluster = Cluster(slurm="-N 2", workers=2, startup_timeout=timeout, slurm_login=login)
        seen_pending = threading.Event()

        def interrupt_once_pending() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(slurm_env.jobs()) < 2:
                time.sleep(0.2)
            seen_pending.set()
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt_once_pending, daemon=True).start()
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="mwnotebook.launchers"):
            with pytest.raises(KeyboardInterrupt):
                cluster.start()
        waited = time.monotonic() - started
        assert seen_pending.is_set()
        # Not the end of the wait: the interrupt ended it (the timeout would have taken 300 s).
        assert waited < timeout / 2, f"the cell ended only after {waited:.0f} s"
        assert "Ctrl-C while Slurm job" in caplog.text and "withdrawn" in caplog.text, caplog.text
        assert slurm_env.jobs() == [blocker]  # ours was cancelled, the blocker is untouched
        assert not cluster.started
    finally:
        slurm_env.run("scancel", blocker, check=False)


def test_silently_dead_link_to_the_login_node_cancels_the_job(laptop: slurm_cluster.SlurmCluster,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The network to the login node dies without a FIN or RST (sshd notices nothing for hours):
    on the login host the agents hear no ping for 10 s and end their kernels, the reaper hears none
    for its limit (30 s; 10 s here, to keep the test short) and cancels the job; the notebook sees
    its workers gone."""
    monkeypatch.setattr(slurm_job, "REAPER_SILENCE_LIMIT", 10.0)
    with Cluster(slurm="-N 2", slurm_login=laptop.login.alias, workers=2) as cluster:
        cluster.start()
        (job,) = laptop.jobs()
        pids = [s.pid for s in cluster.status()]
        route = ["ip", "route", "add", "blackhole", f"{laptop.login.address}/32"]
        subprocess.run(route, check=True, capture_output=True, timeout=10)
        try:
            deadline = time.monotonic() + 60
            # squeue from the login host: this namespace cannot reach slurmctld now.
            while time.monotonic() < deadline and (laptop.jobs(on_login=True)
                                                   or any(running(p) for p in pids)):
                time.sleep(0.5)
            assert not laptop.jobs(on_login=True), f"job {job} still there 60 s after the link died"
            assert not any(running(p) for p in pids), "a kernel outlived the link"
            status = cluster.status()
            assert not any(s.alive for s in status), status
        finally:
            subprocess.run(["ip", "route", "del", *route[3:]], capture_output=True, timeout=10)


def test_ps_fit_through_the_login_node(laptop: slurm_cluster.SlurmCluster) -> None:
    """``--ps 1 --workers 2 --slurm-login``: every task a job step started on the login node, placed
    by the rule on the job's nodes (launchers/slurm/launcher.py), the coordinator and the servers
    reached through the login node's forwards; the tutorial's fit trains, its loss falling."""
    from testbed.ps_cells import PS_FIT as FIT
    from testbed.ps_cells import losses

    n0, n1 = laptop.node_names
    with Cluster(workers=2, ps=1, cpu=True, slurm="-N 2", slurm_login=laptop.login.alias) as cluster:
        cluster.start()
        assert {i.task: i.host for i in cluster.status()} == {
            "chief:0": n0, "worker:0": n0, "worker:1": n1, "ps:0": n1}
        for info in cluster.status():  # each task's process in its node's namespace
            host = laptop.nodes[laptop.node_names.index(info.host)]
            assert info.alive and info.pid in slurm_cluster.netns_hosts.ns_pids(host.netns), info
        login_commands = slurm_cluster.netns_hosts.describe_pids(  # every srun on the login host
            slurm_cluster.netns_hosts.ns_pids(laptop.login.netns))
        assert sum(" srun " in f" {c} " for c in login_commands) >= 4, login_commands
        result = cluster.run(FIT.replace("EPOCHS", "3"), timeout=300)
        values = losses(result.stdout(0), "losses")
        assert len(values) == 3 and values[-1] < values[0], values
