"""Slurm workers forked from their node's worker template (one job step per node, kept for the
allocation; launchers/remote/template_pool.py) on the real Slurm test cluster."""

from __future__ import annotations

import pytest

from mwnotebook import Cluster
from testbed import slurm_cluster
from testbed.seed_cell import SEED_CELL, expected_line

pytestmark = [pytest.mark.slurm, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(400)]


def test_slurm_workers_are_forked_from_their_nodes_template(slurm_env: slurm_cluster.SlurmCluster) -> None:
    with Cluster(slurm="-N 2", cpu=True) as cluster:
        cluster.start()
        job = slurm_env.jobs()[0]
        templates = {t.place: t.pid for t in cluster.launcher.templates}
        assert sorted(templates) == sorted(slurm_env.node_names)
        status = cluster.status()
        for info, node, host in zip(status, slurm_env.node_names, slurm_env.net.hosts):
            assert slurm_cluster.netns_hosts.parent_pid(info.pid) == templates[node]
            assert templates[node] in slurm_cluster.netns_hosts.ns_pids(host.netns)
        first = cluster.run("import os, sys\nprint('tensorflow' in sys.modules, os.environ['SLURM_JOB_ID'])")
        assert [first.stdout(i).split() for i in range(2)] == [["True", job]] * 2
        result = cluster.run(SEED_CELL, timeout=300)
        for i in range(2):
            assert result.stdout(i) == expected_line(i) + "\n", result.stdout(i)[-2000:]
        cluster.restart()  # the same templates fork the new kernels
        for info, node in zip(cluster.status(), slurm_env.node_names):
            assert info.pid not in [s.pid for s in status] and slurm_cluster.netns_hosts.parent_pid(info.pid) == templates[node]
    left = slurm_env.wait_no_leftovers(15)
    assert not left, left
