"""The kernels that run a cluster's cells: the launcher that places them, their TensorFlow addresses
and environments, and the workers themselves -- started in parallel, each connected and set up
before the group counts as started; replaced, released, stopped or killed as one group.

:class:`WorkerGroup` is one collaborator of :class:`~mwnotebook.engine.async_cluster.AsyncCluster`,
which decides when each of these happens (and starts a ``--ps`` cluster's servers in between:
engine/roles/task_roles.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mwnotebook.config.roles import RoleLayout
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import worker_envs
from mwnotebook.engine.cell.diagnose import diagnose
from mwnotebook.engine.cell.late_output import LateOutput
from mwnotebook.engine.workers.bootstrap import RELEASE_CODE, setup_code
from mwnotebook.engine.workers.worker import Worker
from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers import Launcher, make_launcher
from mwnotebook.launchers.capabilities import AbortsStart, Isolates, ReplacesNodes, ReportsJob
from mwnotebook.shared.events import EventSink, WorkerState, WorkerStateChanged

log = logging.getLogger(__name__)


class WorkerGroup:
    """The cell kernels of one cluster. All methods run on the cluster's event loop.

    ``count``: how many kernels run the cell (every replica, or a ``--ps`` cluster's coordinator,
    plus an evaluator); ``late``: where output of ended requests goes, shared with the servers;
    ``launcher``: the one to use (default: made from the spec at the first :meth:`place`).
    """

    def __init__(self, spec: ClusterSpec, layout: RoleLayout, count: int, late: LateOutput,
                 launcher: Launcher | None = None) -> None:
        self._spec = spec
        self._layout = layout
        self._count = count
        self._late = late
        self._launcher = launcher
        self._workers: list[Worker] = []
        self._envs: list[dict[str, str]] = []
        self._addresses: list[str] = []
        self._release: asyncio.Future[None] | None = None

    @property
    def workers(self) -> tuple[Worker, ...]:
        """The running workers, in cell order (empty before a start and while they are replaced)."""
        return tuple(self._workers)

    @property
    def addresses(self) -> list[str]:
        """Every training task's TensorFlow address, in address order ([] before a start)."""
        return list(self._addresses)

    @property
    def envs(self) -> list[dict[str, str]]:
        """Each cell kernel's environment ([] before a start)."""
        return [dict(env) for env in self._envs]

    @property
    def launcher(self) -> Launcher | None:
        """The launcher (None before a start and after a stop, unless one was given)."""
        return self._launcher

    @property
    def network_isolated(self) -> bool:
        """True when the workers' TensorFlow ports sit in a private network namespace."""
        return isinstance(self._launcher, Isolates) and self._launcher.isolated

    async def place(self) -> Launcher:
        """Reserve the TensorFlow addresses and compute every kernel's environment; the launcher."""
        if self._launcher is None:
            self._launcher = make_launcher(self._spec)
        self._addresses = await self._launcher.tf_addresses(len(self._layout.training_tasks()))
        self._envs = worker_envs(self._spec, self._addresses)
        return self._launcher

    async def start(self, emit: EventSink) -> None:
        """Start, connect and set up a worker per cell task; ``emit`` hears their state changes (the
        sink of whoever asked: a start, a restart, a cell's run). On failure none is left running."""
        assert self._launcher is not None
        launcher = self._launcher
        for i in range(self._count):
            _state(emit, i, "starting")
        started = await _launch_all(launcher, self._envs)
        workers = [Worker(h, self._late) for h in started if not isinstance(h, BaseException)]
        failed = [exc for exc in started if isinstance(exc, BaseException)]
        try:
            if failed:
                raise failed[0]
            connected = await asyncio.gather(*(w.connect(self._spec.startup_timeout) for w in workers),
                                             return_exceptions=True)
            errors = [exc for exc in connected if isinstance(exc, BaseException)]
            if errors:
                raise errors[0]
            await self._run_setup(workers)
        except BaseException:
            await asyncio.gather(*(w.kill() for w in workers), return_exceptions=True)
            for i in range(self._count):
                _state(emit, i, "stopped")
            raise
        for w in workers:
            _state(emit, w.index, "idle")
        self._workers = workers

    async def _run_setup(self, workers: list[Worker]) -> None:
        code = setup_code(self._spec)
        if not code:
            return
        outcomes = await asyncio.gather(*(w.execute(code, _ignore, silent=True) for w in workers))
        for w, outcome in zip(workers, outcomes):
            if outcome.status != "ok":
                hint = diagnose(outcome.ename, outcome.evalue)
                raise ClusterStartError(
                    f"worker {w.index} on {w.handle.host} failed its set-up ({outcome.ename}: "
                    f"{outcome.evalue}).{' ' + hint.hint if hint else ''}", worker=w.index, host=w.handle.host)

    async def run_fresh_setup(self, code: str) -> None:
        """The caller's own set-up in fresh workers (the command-line runner's preamble)."""
        outcomes = await asyncio.gather(*(w.execute(code, _ignore, silent=True) for w in self._workers))
        failed = [w.index for w, o in zip(self._workers, outcomes) if o.status != "ok"]
        if failed:
            raise ClusterStartError(f"worker {failed[0]} failed the set-up of a fresh worker", worker=failed[0])

    async def move_off_lost_nodes(self) -> list[str]:
        """Before fresh workers start after a loss: let the launcher move workers off places that are
        gone (new addresses and environments then); the lines saying where, or []."""
        launcher = self._launcher
        assert launcher is not None
        moved = await launcher.replace_lost_nodes() if isinstance(launcher, ReplacesNodes) else []
        if moved:
            await self.place()
        return moved

    async def interrupt(self) -> None:
        """SIGINT to every worker."""
        await asyncio.gather(*(w.handle.interrupt() for w in self._workers))

    async def drop(self) -> None:
        """Kill every worker now (a restart follows)."""
        await self.end(lambda worker: worker.kill())

    async def end(self, end: Callable[[Worker], Awaitable[None]]) -> None:
        """End every worker with ``end`` (shutdown or kill), in parallel."""
        workers, self._workers = self._workers, []
        await asyncio.gather(*(end(w) for w in workers), return_exceptions=True)

    def release_later(self) -> None:
        """Let every worker free what the last cell replaced, in the background, now that no
        collective is in flight; the next cell waits for it (see worker/_lifetime.py)."""
        if self._workers:
            self._release = asyncio.ensure_future(_release(list(self._workers)))

    async def wait_for_release(self) -> None:
        if self._release is not None:
            await asyncio.gather(self._release, return_exceptions=True)
            self._release = None

    async def drop_release(self) -> None:
        if self._release is not None:
            self._release.cancel()
            await asyncio.gather(self._release, return_exceptions=True)
            self._release = None

    def abort_start(self) -> None:
        """A start waiting in a scheduler's queue ends now (Slurm: the job is cancelled)."""
        if isinstance(self._launcher, AbortsStart):
            self._launcher.abort_start()

    async def scheduler_status(self) -> dict[str, Any] | None:
        """The batch job the workers run in (Slurm: job id, nodes, state), or None without one."""
        return await self._launcher.status() if isinstance(self._launcher, ReportsJob) else None

    async def close(self) -> None:
        """Release the launcher's ports and files (after every kernel it started has ended)."""
        if self._launcher is not None:
            await self._launcher.close()
            self._launcher = None


async def _launch_all(launcher: Launcher, envs: list[dict[str, str]]) -> list[Any]:
    """Every kernel's launch, each outcome a handle or the exception. A cancel (a cell killed by a
    second Ctrl-C while its ``--max-restarts`` restart starts fresh workers) waits for the launches
    under way and kills what they started: a launch runs partly in a thread, so without this a
    kernel started after the cancel would be left running with nobody holding its handle."""
    # cell kernel i is launch slot i (config/task_placement.py)
    launches = asyncio.ensure_future(asyncio.gather(*(launcher.start(i, env) for i, env in enumerate(envs)),
                                                    return_exceptions=True))
    try:
        return await asyncio.shield(launches)
    except asyncio.CancelledError:
        started = await launches
        await asyncio.gather(*(h.kill() for h in started if not isinstance(h, BaseException)),
                             return_exceptions=True)
        raise


def _ignore(_msg: dict[str, Any]) -> None:
    """The output handler of a silent request."""


def _state(emit: EventSink, index: int, state: WorkerState) -> None:
    emit(WorkerStateChanged(worker=index, state=state, error=""))


async def _release(workers: list[Worker]) -> None:
    async def release(worker: Worker) -> None:
        try:
            await asyncio.wait_for(worker.execute(RELEASE_CODE, _ignore, silent=True), 30)
        except Exception:  # a worker that cannot release is dealt with by the next cell
            log.debug("worker %d did not release", worker.index, exc_info=True)
    await asyncio.gather(*(release(w) for w in workers))
