"""The Slurm test cluster of tests/slurm (tests/_shared/slurm_cluster.py), for the panel's Slurm test."""

from tests.slurm.conftest import slurm, slurm_env

__all__ = ["slurm", "slurm_env"]
