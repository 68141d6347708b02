"""The tasks of a cluster that do not run the cell: a --ps cluster's worker and ps servers
(engine/roles/task_servers.py), started before the coordinator that uses them and watched for a lost
parameter server while a cell runs; and, with --coordinator notebook, this process as the
coordinator (engine/roles/notebook_coordinator.py holds its hand-over and messages).

:class:`TaskRoles` is one collaborator of :class:`~mwnotebook.engine.async_cluster.AsyncCluster`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from mwnotebook.config.roles import RoleLayout, Task
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.task_placement import launch_slots
from mwnotebook.config.worker_env import task_envs
from mwnotebook.engine.cell.late_output import LateOutput
from mwnotebook.engine.roles import notebook_coordinator
from mwnotebook.engine.roles.task_servers import TaskServers
from mwnotebook.launchers import Launcher

log = logging.getLogger(__name__)


#: Seconds a --ps cluster's coordinator gets to fail on its own after a parameter server is lost
#: before its cell is aborted (it normally raises UnavailableError at once).
PS_LOSS_GRACE = 15.0


class TaskRoles:
    """The parameter-server task servers and the notebook as coordinator.

    ``running_cell_abort()``: the abort event of the cell running now (None between cells); a lost
    parameter server sets it after :data:`PS_LOSS_GRACE` seconds.
    """

    def __init__(self, spec: ClusterSpec, layout: RoleLayout, late: LateOutput,
                 running_cell_abort: Callable[[], asyncio.Event | None]) -> None:
        self._spec = spec
        self._layout = layout
        self._late = late
        self._running_cell_abort = running_cell_abort
        #: A --ps cluster's worker and ps servers; None otherwise (and before a start).
        self._servers: TaskServers | None = None
        #: Aborts a --ps cluster's cell PS_LOSS_GRACE s after a lost ps, unless the servers are renewed first.
        self._ps_loss_timer: asyncio.TimerHandle | None = None
        #: --coordinator notebook: True once this process has the chief's TF_CONFIG.
        self._joined = False

    @property
    def servers(self) -> TaskServers | None:
        """A --ps cluster's worker and ps servers (None for other clusters)."""
        return self._servers

    @property
    def joined(self) -> bool:
        """True while this process is the cluster's coordinator (--coordinator notebook)."""
        return self._joined

    @property
    def lost_ps(self) -> tuple[Task, str] | None:
        """The first parameter server lost since the servers started, and how it ended."""
        return self._servers.lost_ps if self._servers is not None else None

    def not_back(self) -> tuple[Task, ...]:
        """Worker servers lost and not started again (their node failed): engine/roles/task_servers.py."""
        return self._servers.not_back() if self._servers is not None else ()

    async def check_lost_ps(self) -> tuple[Task, str] | None:
        """:attr:`lost_ps`, the parameter servers looked at now (not only at the watch loop's pace)."""
        return await self._servers.check_ps_now() if self._servers is not None else None

    async def every_ps_alive(self) -> bool:
        return self._servers is None or await self._servers.every_ps_alive()

    def join_here(self, chief_tf_config: str, addresses: Sequence[str]) -> None:
        """--coordinator notebook: this process takes the chief's variables (its servers serve)."""
        chief = self._layout.cell_tasks()[0]
        notebook_coordinator.join(chief_tf_config, self._layout.address_of(addresses, chief),
                                  self._spec.use_legacy_keras)
        self._joined = True

    def notice(self, addresses: Sequence[str]) -> str:
        """--coordinator notebook: what listens where, unauthenticated ("" before a start, or otherwise)."""
        if not self._joined or self._servers is None:
            return ""
        return notebook_coordinator.notice_for(self._layout, addresses)

    def leave_here(self) -> bool:
        """This process is no longer the coordinator; True if it was."""
        if not self._joined:
            return False
        notebook_coordinator.leave()
        self._joined = False
        return True

    async def start_servers(self, launcher: Launcher, addresses: Sequence[str]) -> None:
        """A --ps cluster's worker and ps servers, (re)started before the coordinator that uses them."""
        if not self._layout.parameter_server:
            return
        if self._ps_loss_timer is not None:  # the loss it watched is handled: every server is new
            self._ps_loss_timer.cancel()
            self._ps_loss_timer = None
        await self.stop_servers()
        envs = task_envs(self._spec, list(addresses))
        self._servers = TaskServers(launcher, {t: envs[t] for t in self._layout.server_tasks()},
                                    launch_slots(self._layout), self._spec.startup_timeout, self._late,
                                    self._lost_ps_during_cell)
        await self._servers.start()

    async def stop_servers(self) -> None:
        if self._servers is not None:
            await self._servers.kill()
            self._servers = None

    def _lost_ps_during_cell(self) -> None:
        """The coordinator normally fails on its own at once (UnavailableError); never let it hang.

        The timer sets the abort event of the cell that was running when the ps was lost, never a
        later one's: a rerun started within the grace on the restarted cluster must not be stopped."""
        abort = self._running_cell_abort()
        if abort is not None:
            self._ps_loss_timer = asyncio.get_running_loop().call_later(PS_LOSS_GRACE, abort.set)
