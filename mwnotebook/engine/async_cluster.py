"""The async core: N worker kernels that run a cell in lockstep, restarted as a group after a fault.

:class:`AsyncCluster` is assembled from one class per concern (engine/cluster_state.py says which);
this module adds what one can ask of a running cluster: each task's status, the scheduler's job,
read-only snippets run on every worker, and every worker's stacks.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mwnotebook.config.roles import layout_of
from mwnotebook.engine.cell.stacks import StacksReport, dump_stacks
from mwnotebook.engine.cell.with_restarts import CellRunner
from mwnotebook.engine.cluster_status import WorkerInfo, cluster_status
from mwnotebook.engine.workers.connection import Worker
from mwnotebook.errors import ClusterStateError
from mwnotebook.launchers.capabilities import ReportsJob


class AsyncCluster(CellRunner):
    """N worker kernels that run cells in lockstep. All methods run on one event loop."""

    async def status(self) -> list[WorkerInfo]:
        """Every task: the kernels that run the cell first, then a --ps cluster's servers
        (engine/cluster_status.py)."""
        return await cluster_status(layout_of(self.spec), self._addresses, self._states, self._workers,
                                    self._servers, coordinator_here=self._joined)

    async def scheduler_status(self) -> dict[str, Any] | None:
        """The batch job the workers run in (Slurm: job id, nodes, state), or None without one."""
        return await self._launcher.status() if isinstance(self._launcher, ReportsJob) else None

    async def query(self, code: str, timeout: float = 30.0, servers: bool = False) -> list[str | None]:
        """Run a small read-only snippet silently on every worker; each one's stdout (None on error).

        For looking inside the workers (what devices TensorFlow sees) without it counting as a cell.
        ``servers``: a --ps cluster's server kernels are asked too, their answers after the cell
        kernels' in :meth:`status` order (with --coordinator notebook, None first for this process).
        """
        if self._running:
            raise ClusterStateError("a cell is running on this cluster; ask again when it is done")
        if self._release_task is not None:
            await asyncio.gather(self._release_task, return_exceptions=True)

        async def ask(worker: Worker) -> str | None:
            out: list[str] = []

            def collect(msg: dict[str, Any]) -> None:
                if msg["msg_type"] == "stream" and msg["content"].get("name") == "stdout":
                    out.append(msg["content"].get("text", ""))
            try:
                outcome = await asyncio.wait_for(worker.execute(code, collect, silent=True), timeout)
            except asyncio.TimeoutError:
                return None
            return "".join(out) if outcome.status == "ok" else None

        asked: list[Worker | None] = list(self._workers)
        if servers and self._servers is not None:
            if self._joined:
                asked.insert(0, None)
            asked += [self._servers.server(task) for task in self._servers.tasks()]

        async def answer(worker: Worker | None) -> str | None:
            return None if worker is None else await ask(worker)
        return list(await asyncio.gather(*(answer(w) for w in asked)))

    async def stacks(self) -> StacksReport:
        """Every worker's current Python stacks, main thread first; works while a cell is blocked."""
        return await dump_stacks(self._workers, self._cell_code)
