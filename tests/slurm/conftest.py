"""Fixtures for tests against a real Slurm (see slurm_cluster.py): one cluster per test session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "remote"))
import slurm_cluster


@pytest.fixture(scope="session")
def slurm() -> Iterator[slurm_cluster.SlurmCluster]:
    """munged + slurmctld + two slurmd nodes in their own network namespaces; skips with the reason
    where that cannot run (no root, no Slurm binaries)."""
    reason = slurm_cluster.unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = slurm_cluster.create(2)
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def slurm_env(slurm: slurm_cluster.SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> slurm_cluster.SlurmCluster:
    """SLURM_CONF pointing at the test cluster, as a login node's configuration would; checks
    afterwards that no job and no process on the nodes is left."""
    for name, value in slurm.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    yield slurm
    left = slurm.wait_no_leftovers(15)
    assert not left, f"left behind on the Slurm test cluster: {left}"
