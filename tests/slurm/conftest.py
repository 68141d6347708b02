"""Fixtures for tests against a real Slurm (see slurm_cluster.py): one two-node cluster per test
session, and a three-node one (a job with a spare node) for the modules that ask for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed import slurm_cluster


def _cluster(nodes: int, suffix: str) -> Iterator[slurm_cluster.SlurmCluster]:
    reason = slurm_cluster.unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = slurm_cluster.create(nodes, suffix=suffix)
    try:
        yield cluster
    finally:
        cluster.destroy()


def _use(cluster: slurm_cluster.SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[slurm_cluster.SlurmCluster]:
    for name, value in cluster.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    yield cluster
    left = cluster.wait_no_leftovers(15)
    assert not left, f"left behind on the Slurm test cluster: {left}"


@pytest.fixture(scope="session")
def slurm() -> Iterator[slurm_cluster.SlurmCluster]:
    """munged + slurmctld + two slurmd nodes in their own network namespaces; skips with the reason
    where that cannot run (no root, no Slurm binaries)."""
    yield from _cluster(2, "s")


@pytest.fixture(scope="module")
def slurm3() -> Iterator[slurm_cluster.SlurmCluster]:
    """The same with three nodes, for the module that asks (made in about 1.5 s, removed after it)."""
    yield from _cluster(3, "s3")


@pytest.fixture
def slurm_env(slurm: slurm_cluster.SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[slurm_cluster.SlurmCluster]:
    """SLURM_CONF pointing at the test cluster, as a login node's configuration would; checks
    afterwards that no job and no process on the nodes is left."""
    yield from _use(slurm, monkeypatch)


@pytest.fixture
def slurm3_env(slurm3: slurm_cluster.SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[slurm_cluster.SlurmCluster]:
    """``slurm_env`` for the three-node cluster."""
    yield from _use(slurm3, monkeypatch)
