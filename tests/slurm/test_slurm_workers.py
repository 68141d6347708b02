"""Workers as Slurm job steps on a real Slurm (munged, slurmctld, two slurmd nodes in their own
network namespaces; see slurm_cluster.py): the seed across two nodes, a killed kernel, scancel from
outside, an existing allocation, bad arguments, a pending job, and a killed notebook process.
The ``slurm_env`` fixture checks after every test that no job and no process on the nodes is left."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from mwnotebook import Cluster, ClusterInterrupted, ClusterStartError, WorkerDiedError
from testbed import slurm_cluster
from testbed.processes import running
from testbed.seed_cell import SEED_CELL, expected_line

from .faults import kill_worker_mid_run

pytestmark = [pytest.mark.slurm, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]


def established_peers(host: slurm_cluster.netns_hosts.TestHost) -> set[str]:
    """``addr:port`` of the remote ends of the TCP connections established in a node's namespace."""
    peers = set()
    for line in host.exec("ss", "-tnH", "state", "established").stdout.splitlines():
        addr, _, port = line.split()[-1].rpartition(":")
        peers.add(f"{addr.strip('[]').removeprefix('::ffff:')}:{port}")
    return peers




def test_killed_kernel_then_the_seed_on_two_nodes(slurm_env: slurm_cluster.SlurmCluster) -> None:
    n0, n1 = slurm_env.nodes
    with Cluster(slurm="-N 2", cpu=True) as cluster:
        cluster.start()
        jobs = slurm_env.jobs()
        assert len(jobs) == 1, jobs
        # One worker per node, TF ports chosen on each node, the nodes' own addresses.
        workers = cluster.tf_configs[0]["cluster"]["worker"]
        assert [w.rsplit(":", 1)[0] for w in workers] == [n0.address, n1.address]
        assert all(not w.endswith(":8888") for w in workers)
        status = cluster.status()
        assert [s.host for s in status] == slurm_env.node_names
        for info, host in zip(status, (n0, n1)):
            assert info.alive and info.pid in slurm_cluster.netns_hosts.ns_pids(host.netns)
        # The workers really are Slurm tasks of that job.
        env = cluster.run("import os; print(os.environ['SLURM_JOB_ID'], os.environ['SLURMD_NODENAME'])")
        assert [env.stdout(i).split() for i in range(2)] == [[jobs[0], n] for n in slurm_env.node_names]

        # A node's kernel is killed mid-run: named, the group restarted in the same allocation.
        before = [s.pid for s in status]
        kill_worker_mid_run(cluster, before[1], worker=1)
        cluster.start()  # waits for the background restart
        assert slurm_env.jobs() == jobs
        status = cluster.status()
        for old, new, host in zip(before, status, (n0, n1)):
            assert new.alive and new.pid != old and not running(old)
            assert new.pid in slurm_cluster.netns_hosts.ns_pids(host.netns)

        # The seed on the fresh kernels: both print its exact line.
        result = cluster.run(SEED_CELL, timeout=300)
        for i in range(2):
            assert expected_line(i) in result.stdout(i).splitlines(), result.stdout(i)[-2000:]
        # The collectives crossed the bridge: a channel from one node to the other's gRPC server.
        assert workers[1] in established_peers(n0) or workers[0] in established_peers(n1)
    # Leaving the block stopped the cluster and cancelled the job.
    left = slurm_env.wait_no_leftovers(15)
    assert not left, left


def test_interrupt_then_scancel_from_outside(slurm_env: slurm_cluster.SlurmCluster, ctrl_c_raises: None) -> None:
    with Cluster(slurm="-N 2", cpu=True) as cluster:
        cluster.start()
        (job,) = slurm_env.jobs()
        # Ctrl-C reaches every worker through its job step's agent; the next cell runs.
        threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(ClusterInterrupted) as info:
            cluster.run("import time; time.sleep(60)")
        assert {f.kind for f in info.value.failures} == {"interrupted"}
        assert cluster.run("print('after ctrl-c')").stdout(1) == "after ctrl-c\n"

        # scancel from outside ends the job steps, and with them the kernels.
        pids = [s.pid for s in cluster.status()]
        slurm_env.run("scancel", job)
        deadline = time.monotonic() + 30
        while any(s.alive for s in cluster.status()) and time.monotonic() < deadline:
            time.sleep(0.2)
        status = cluster.status()
        assert not any(s.alive for s in status), status
        for pid in pids:
            assert not slurm_cluster.netns_hosts.running(pid)

        # The next cells: the dead workers are reported; the restart in the ended job cannot work, and
        # the cell after that is no dead end: it requests a new allocation by itself and runs there.
        with pytest.raises(WorkerDiedError):
            cluster.run("print('in the cancelled job')")
        result = cluster.run("import os; print(os.environ['SLURM_JOB_ID'])")
        (new_job,) = slurm_env.jobs()
        assert new_job != job and [result.stdout(i).strip() for i in range(2)] == [new_job, new_job]


def test_existing_allocation_is_used_and_not_cancelled(slurm_env: slurm_cluster.SlurmCluster) -> None:
    granted = slurm_env.run("salloc", "--no-shell", "-N", "2", "-n", "2")
    job = granted.stderr.split("allocation")[-1].split()[0]
    try:
        with Cluster(slurm_job=job, workers=2) as cluster:
            result = cluster.run("import os; print(os.environ['SLURM_JOB_ID'])")
            assert [result.stdout(i).strip() for i in range(2)] == [job, job]
        assert job in slurm_env.jobs(), "an allocation mwnotebook did not make was cancelled"
        # Inside an allocation (SLURM_JOB_ID set, e.g. JupyterHub's batchspawner) a bare --slurm uses it.
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_JOB_ID", job)
            with Cluster(slurm="", workers=2) as cluster:
                result = cluster.run("import os; print(os.environ['SLURM_JOB_ID'])")
                assert [result.stdout(i).strip() for i in range(2)] == [job, job]
        assert slurm_env.jobs() == [job], "no second allocation, and this one still there"
    finally:
        slurm_env.run("scancel", job, check=False)


def test_bad_salloc_arguments_fail_clearly(slurm_env: slurm_cluster.SlurmCluster) -> None:
    cluster = Cluster(slurm="-p nosuchpartition", workers=2)
    with pytest.raises(ClusterStartError) as info:
        cluster.start()
    assert "salloc failed" in str(info.value) and "partition" in str(info.value).lower()
    assert not cluster.started
    # A failure after the allocation was granted (no such interpreter on the nodes): the error names
    # the node and says why, and the job is cancelled (slurm_env checks that no job is left).
    cluster = Cluster(slurm="-N 2", workers=2, python="/nonexistent/python3")
    with pytest.raises(ClusterStartError) as info:
        cluster.start()
    assert info.value.host in slurm_env.node_names
    assert "/nonexistent/python3" in str(info.value), str(info.value)


def test_pending_job_times_out_and_is_cancelled(slurm_env: slurm_cluster.SlurmCluster,
                                                caplog: pytest.LogCaptureFixture) -> None:
    busy = slurm_env.run("salloc", "--no-shell", "-N", "2", "--exclusive")
    blocker = busy.stderr.split("allocation")[-1].split()[0]
    try:
        cluster = Cluster(slurm="-N 2", workers=2, startup_timeout=6)
        with caplog.at_level("WARNING", logger="mwnotebook.launchers"):
            with pytest.raises(ClusterStartError) as info:
                cluster.start()
        assert "not granted within 6 s" in str(info.value)
        assert "pending" in caplog.text.lower()
        assert slurm_env.jobs() == [blocker]  # ours was cancelled, the blocker is untouched
    finally:
        slurm_env.run("scancel", blocker, check=False)


def test_killed_notebook_process_leaves_no_job(slurm_env: slurm_cluster.SlurmCluster) -> None:
    slurm_cluster.start_and_kill_a_notebook(slurm_env, "slurm='-N 2', workers=2")
    left = slurm_env.wait_no_leftovers(20)
    assert not left, f"left after the notebook process died: {left}"
