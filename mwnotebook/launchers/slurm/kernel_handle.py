"""A worker kernel in a Slurm job step as the engine sees it (``launchers/slurm/launcher.py`` starts
it): a remote kernel (``launchers/remote/kernel_handle.py``) that says in Slurm's words why it is gone."""

from __future__ import annotations

from mwnotebook.launchers.remote.kernel_handle import RemoteKernelHandle
from mwnotebook.launchers.slurm.shell import SlurmShell

__all__ = ["NodePlace", "SlurmKernelHandle"]


class SlurmKernelHandle(RemoteKernelHandle):
    """A kernel in a job step, reached at its node's address (or through the login node)."""

    shell: SlurmShell | None = None

    def _lost_description(self) -> str:
        lost = self.shell.lost() if self.shell is not None else ""
        if lost:
            return f"lost the SSH connection to the login node: {lost}"
        return f"its Slurm job step on {self.host} ended (job cancelled or node lost?)"


class NodePlace:
    """What a handle needs of its place (``target`` is the name shown for the worker)."""

    def __init__(self, name: str) -> None:
        self.target = name
        self.host = name
