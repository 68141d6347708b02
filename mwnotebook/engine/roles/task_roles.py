"""The tasks of a cluster that do not run the cell: a --ps cluster's worker and ps servers
(engine/roles/task_servers.py), started before the coordinator that uses them and watched for a lost
parameter server while a cell runs; and, with --coordinator notebook, this process as the
coordinator (engine/roles/notebook_coordinator.py holds its hand-over and messages).
"""

from __future__ import annotations

import asyncio
import logging

from mwnotebook.config.roles import layout_of
from mwnotebook.config.worker_env import task_envs
from mwnotebook.engine.cluster_state import ClusterState
from mwnotebook.engine.roles import notebook_coordinator
from mwnotebook.engine.roles.task_servers import TaskServers

log = logging.getLogger(__name__)


#: Seconds a --ps cluster's coordinator gets to fail on its own after a parameter server is lost


#: before its cell is aborted (it normally raises UnavailableError at once).
PS_LOSS_GRACE = 15.0


class TaskRoles(ClusterState):
    """The parameter-server task servers and the notebook as coordinator."""

    def _join_here(self) -> None:
        """--coordinator notebook: this process takes the chief's variables (its servers serve)."""
        chief = layout_of(self.spec).cell_tasks()[0]
        notebook_coordinator.join(self._envs[0]["TF_CONFIG"], layout_of(self.spec).address_of(self._addresses, chief),
                                  self.spec.use_legacy_keras)
        self._envs = []
        self._joined = True
        self._states[0] = "notebook"
        log.info("%s", self.notebook_notice)

    @property
    def notebook_notice(self) -> str:
        """--coordinator notebook: what listens where, unauthenticated ("" before a start, or otherwise)."""
        if not self._joined or self._servers is None:
            return ""
        return notebook_coordinator.notice_for(layout_of(self.spec), self._addresses)

    def _leave_here(self) -> None:
        if self._joined:
            notebook_coordinator.leave()
            self._joined = False
            self._states[0] = "stopped"

    async def _start_servers(self) -> None:
        """A --ps cluster's worker and ps servers, (re)started before the coordinator that uses them."""
        layout = layout_of(self.spec)
        if not layout.parameter_server:
            return
        if self._ps_loss_timer is not None:  # the loss it watched is handled: every server is new
            self._ps_loss_timer.cancel()
            self._ps_loss_timer = None
        await self._stop_servers()
        assert self._launcher is not None
        envs = task_envs(self.spec, self._addresses)
        self._servers = TaskServers(self._launcher, {t: envs[t] for t in layout.server_tasks()},
                                    self.spec.startup_timeout, self.late_output, self._lost_ps_during_cell)
        await self._servers.start()

    async def _stop_servers(self) -> None:
        if self._servers is not None:
            await self._servers.kill()
            self._servers = None

    def _lost_ps_during_cell(self) -> None:
        """The coordinator normally fails on its own at once (UnavailableError); never let it hang.

        The timer sets the abort event of the cell that was running when the ps was lost, never a
        later one's: a rerun started within the grace on the restarted cluster must not be stopped."""
        if self._running and self._abort is not None:
            self._ps_loss_timer = asyncio.get_running_loop().call_later(PS_LOSS_GRACE, self._abort.set)

    @property
    def servers(self) -> TaskServers | None:
        """A --ps cluster's worker and ps servers (None for other clusters)."""
        return self._servers
