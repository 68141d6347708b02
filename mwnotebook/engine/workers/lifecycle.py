"""Starting, restarting, stopping and killing a cluster's worker kernels (with the servers and
coordinator of engine/roles/task_roles.py): in parallel, each connected and set up before the cluster
counts as started; a start under way is awaited, never begun twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from mwnotebook.config.roles import layout_of
from mwnotebook.config.worker_env import worker_envs
from mwnotebook.engine.cell.diagnose import diagnose
from mwnotebook.engine.cluster_state import ignore_event
from mwnotebook.engine.roles import notebook_coordinator
from mwnotebook.engine.roles.task_roles import TaskRoles
from mwnotebook.engine.workers.bootstrap import setup_code
from mwnotebook.engine.workers.connection import Worker
from mwnotebook.errors import ClusterStartError, ClusterStateError
from mwnotebook.launchers import make_launcher
from mwnotebook.launchers.capabilities import AbortsStart
from mwnotebook.shared.events import EventSink


class WorkerLifecycle(TaskRoles):
    """Start, restart, stop and kill the workers."""

    async def start(self, on_event: EventSink | None = None) -> None:
        """Start every worker in parallel and wait until all answer.

        Idempotent; a caller that arrives while a start is under way (say, one begun in the
        background by ``%mwcluster start``) waits for that start instead of beginning another.
        """
        if self._workers or self._joined:
            return
        if self._start_task is None:
            task = asyncio.ensure_future(self._start(on_event))
            task.add_done_callback(self._start_finished)
            self._start_task = task
        await asyncio.shield(self._start_task)

    async def _start(self, on_event: EventSink | None) -> None:
        emit = on_event or ignore_event
        if self._notebook:
            refused = notebook_coordinator.refusal(self.spec.force)
            if refused is not None:
                raise refused
        if self._launcher is None:
            self._launcher = make_launcher(self.spec)
        try:
            self._addresses = await self._launcher.tf_addresses(len(layout_of(self.spec).training_tasks()))
            self._envs = worker_envs(self.spec, self._addresses)
            await self._start_servers()
            if self._notebook:
                self._join_here()
                return
            self._workers = await self._start_workers(emit)
        except BaseException:
            await self._close_launcher()
            raise

    async def _start_workers(self, emit: EventSink) -> list[Worker]:
        """Start, connect and set up a worker per task; ``emit`` hears their state changes (the
        sink of whoever asked: a start, a restart, a cell's run)."""
        assert self._launcher is not None
        launcher = self._launcher
        for i in range(self._cell_count):
            self._set_state(i, "starting", emit)
        started = await asyncio.gather(*(launcher.start(i, env) for i, env in enumerate(self._envs)),
                                       return_exceptions=True)
        workers = [Worker(h, env, self.late_output) for h, env in zip(started, self._envs)
                   if not isinstance(h, BaseException)]
        failed = [exc for exc in started if isinstance(exc, BaseException)]
        try:
            if failed:
                raise failed[0]
            connected = await asyncio.gather(*(w.connect(self.spec.startup_timeout) for w in workers),
                                             return_exceptions=True)
            errors = [exc for exc in connected if isinstance(exc, BaseException)]
            if errors:
                raise errors[0]
            await self._run_setup(workers)
        except BaseException:
            await asyncio.gather(*(w.kill() for w in workers), return_exceptions=True)
            for i in range(self._cell_count):
                self._set_state(i, "stopped", emit)
            raise
        for w in workers:
            self._set_state(w.index, "idle", emit)
        return workers

    async def _run_setup(self, workers: list[Worker]) -> None:
        code = setup_code(self.spec)
        if not code:
            return
        outcomes = await asyncio.gather(*(w.execute(code, lambda _m: None, silent=True) for w in workers))
        for w, outcome in zip(workers, outcomes):
            if outcome.status != "ok":
                hint = diagnose(outcome.ename, outcome.evalue)
                raise ClusterStartError(
                    f"worker {w.index} on {w.handle.host} failed its set-up ({outcome.ename}: "
                    f"{outcome.evalue}).{' ' + hint.hint if hint else ''}", worker=w.index, host=w.handle.host)

    async def restart(self, on_event: EventSink | None = None) -> None:
        """Replace every worker process with a fresh one (same TF_CONFIGs). Variables are lost."""
        if self._notebook:
            raise ClusterStateError(notebook_coordinator.NO_RESTART)
        if not self._workers:
            raise ClusterStateError("no cluster is running: start one first (%%mwtrain or %mwcluster start)")
        await self._drop_release()
        await asyncio.gather(*(w.kill() for w in self._workers), return_exceptions=True)
        self._workers = []
        await self._start_servers()
        self._workers = await self._start_workers(on_event or ignore_event)

    async def restart_in_background(self) -> None:
        """Kill every worker now and start fresh ones without waiting for them.

        Used after a failed cell: the error reaches the user at once, and the next ``run`` (or
        ``start``) waits for the new workers.
        """
        await self._drop_release()
        workers, self._workers = self._workers, []
        await asyncio.gather(*(w.kill() for w in workers), return_exceptions=True)

        async def start_fresh() -> None:  # after the failed cell's output ended: nobody to tell
            await self._start_servers()
            self._workers = await self._start_workers(ignore_event)

        task = asyncio.ensure_future(start_fresh())
        task.add_done_callback(self._start_finished)
        self._start_task = task

    async def stop(self) -> None:
        """Shut every worker down (politely, then by force) and release ports and files."""
        await self._end_workers(lambda worker: worker.shutdown())
        for i in range(self.spec.workers):
            self._states[i] = "stopped"
        await self._close_launcher()

    async def kill(self) -> None:
        """Stop every worker at once, no questions asked (used at interpreter exit)."""
        if isinstance(self._launcher, AbortsStart):
            # a start waiting in a scheduler's queue ends now (Slurm: the job is cancelled)
            self._launcher.abort_start()
        await self._end_workers(lambda worker: worker.kill())
        await self._close_launcher()

    async def _end_workers(self, end: Callable[[Worker], Awaitable[None]]) -> None:
        """What stop and kill share: a start under way is awaited first (so no worker it makes is
        missed), then every worker is ended with ``end`` in parallel, then the servers."""
        await self._finish_pending_start()
        await self._drop_release()
        workers, self._workers = self._workers, []
        await asyncio.gather(*(end(w) for w in workers), return_exceptions=True)
        await self._stop_servers()
        self._leave_here()
