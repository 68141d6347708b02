"""How worker kernels are started: on this machine or on other hosts over SSH."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mwnotebook.launchers.base import KernelHandle, Launcher
from mwnotebook.launchers.local.launcher import LocalLauncher

if TYPE_CHECKING:
    from mwnotebook.config.spec import ClusterSpec

__all__ = ["KernelHandle", "Launcher", "LocalLauncher", "make_launcher"]


def make_launcher(spec: ClusterSpec) -> Launcher:
    """The launcher a spec asks for: SSH when it names hosts, local otherwise."""
    if getattr(spec, "uses_slurm", False):
        from mwnotebook.launchers.slurm.launcher import SlurmLauncher  # lazily: only Slurm users need it

        return SlurmLauncher.from_spec(spec)
    if spec.hosts:
        from mwnotebook.launchers.ssh.launcher import (
            SSHLauncher,  # imported lazily: asyncssh is only needed for remote hosts
        )

        return SSHLauncher.from_spec(spec)
    # The environment all workers share decides which worker template can fork them (TF_CONFIG and
    # the other per-worker values are set after the fork).
    from mwnotebook.config.roles import layout_of
    from mwnotebook.config.worker_env import worker_envs

    startup_env = worker_envs(spec, ["127.0.0.1:0"] * len(layout_of(spec).training_tasks()))[0]
    return LocalLauncher(python=spec.python, network=spec.network, startup_env=startup_env,
                         template=spec.template)
