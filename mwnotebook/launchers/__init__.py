"""How worker kernels are started: the launcher contract (``base.py``, ``capabilities.py``) and one
subpackage per backend (``local/`` on this machine, ``ssh/`` on hosts over SSH, ``slurm/`` as Slurm
job steps, ``ray/`` in a Ray cluster's placement group, ``remote/`` what SSH and Slurm share: the
agent channel, remote handles and templates).

Importing this package imports no backend: the processes the launchers start import
``mwnotebook.launchers...`` modules too, and must not load jupyter_client or asyncssh for it
(tests/unit/test_lazy_launchers.py). :func:`make_launcher` imports the backend a spec asks for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mwnotebook.launchers.base import KernelHandle, Launcher

if TYPE_CHECKING:
    from mwnotebook.config.spec import ClusterSpec
    from mwnotebook.launchers.local.launcher import LocalLauncher

__all__ = ["KernelHandle", "Launcher", "LocalLauncher", "make_launcher"]


def __getattr__(name: str) -> Any:
    if name == "LocalLauncher":  # PEP 562: the local backend (jupyter_client) only when asked for
        from mwnotebook.launchers.local.launcher import LocalLauncher

        return LocalLauncher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_launcher(spec: ClusterSpec) -> Launcher:
    """The launcher of the spec's backend (``ClusterSpec.backend``: ray, slurm, ssh or local)."""
    backend = spec.backend
    if backend == "ray":
        from mwnotebook.launchers.ray.launcher import RayLauncher  # lazily: only Ray users have Ray

        return RayLauncher.from_spec(spec)
    if backend == "slurm":
        from mwnotebook.launchers.slurm.launcher import SlurmLauncher  # lazily: only Slurm users need it

        return SlurmLauncher.from_spec(spec)
    if backend == "ssh":
        from mwnotebook.launchers.ssh.launcher import (
            SSHLauncher,  # imported lazily: asyncssh is only needed for remote hosts
        )

        return SSHLauncher.from_spec(spec)
    from mwnotebook.config.worker_env import startup_env
    from mwnotebook.launchers.local.launcher import LocalLauncher

    # The environment all workers share decides which worker template can fork them (TF_CONFIG and
    # the other per-worker values are set after the fork).
    return LocalLauncher(python=spec.python, network=spec.network, startup_env=startup_env(spec),
                         template=spec.template)
