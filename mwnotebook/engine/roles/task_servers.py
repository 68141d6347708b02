"""The servers of a ``ParameterServerStrategy`` cluster: ``--workers`` worker tasks and ``--ps``
parameter servers that only run a TensorFlow server, beside the one coordinator kernel that runs
the cell (config/roles.py has the layout).

Each server is an ordinary worker kernel from the cluster's launcher (forked from the worker
template where there is one, in the cluster's private network namespace), in which
:data:`SERVE_CODE` starts ``tf.distribute.Server`` once and returns: the server runs on
TensorFlow's own threads for the life of the process, and the kernel stays free to answer, so it
is started, watched and killed like any worker. (That is what ``Server.join()`` waits on forever
in a stand-alone script, see export/.)

Failures, as TensorFlow handles them (measured on TF 2.21 CPU):

- a worker server that dies and comes back **on the same address** is taken back by the
  coordinator's ``ClusterCoordinator``, which re-runs the steps it lost: so a lost worker is
  restarted here at once with its own TF_CONFIG (its port stays reserved for the cluster's
  life), and the cell goes on;
- a worker server that comes back on a **new** address (moved off a failed Slurm node) is never
  taken back: the coordinator's cluster is fixed when it connects, it opens no connection to the
  new address and trains on with the others (measured: docs/guide/slurm.md, lost nodes). So a
  worker server whose restart failed stays ``lost`` (:meth:`TaskServers.not_back`, a note for the
  status) until the next cell's start restarts the cluster off failed nodes
  (engine/async_cluster.py ``_ready_for_a_cell``);
- a lost parameter server loses variables: the coordinator raises ``UnavailableError``, and only
  a fresh cluster (every task and the coordinator) can go on. :attr:`TaskServers.lost_ps` records
  the cause so the cell's error names it first.

Why the coordinator is by default a kernel of its own and not the notebook (the notebook is one
only on request, ``--coordinator notebook``: engine/roles/notebook_coordinator.py): a process can join
one TensorFlow cluster once. Reconnecting leaves the old gRPC server listening
and the old variables invalid, touching the old ``ClusterCoordinator`` crashed the process, and the
coordinator's own port would sit on the host network without authentication. A coordinator kernel
is restarted with the cluster; the notebook's kernel holds the user's work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from mwnotebook.config.roles import Task
from mwnotebook.engine.cell.late_output import LateOutput
from mwnotebook.engine.workers.worker import Worker
from mwnotebook.errors import ClusterRunError, ClusterStartError, WorkerFailure
from mwnotebook.launchers import Launcher

log = logging.getLogger(__name__)

#: Run once in every server kernel. The server object is kept in the kernel's namespace: while it
#: exists, the gRPC server serves.
SERVE_CODE = """\
def __mwnotebook_serve():
    import json, os
    import tensorflow as tf
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    return tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name=task["type"],
                                task_index=int(task["index"]), protocol="grpc", start=True)
__mwnotebook_server = __mwnotebook_serve()
del __mwnotebook_serve
"""

ServerState = Literal["starting", "serving", "restarting", "lost", "stopped"]

#: The status's note on a worker server whose restart failed (:meth:`TaskServers.not_back`).
NOT_BACK_NOTE = ("not back: its restart failed; training goes on with the other worker servers, and the "
                 "next cell restarts the cluster (off a failed node, on Slurm)")

#: How often the servers' processes are checked while the cluster lives (a lost worker is back on
#: its address within about this long plus a start).
WATCH_INTERVAL = 0.2


def not_back_line(tasks: Sequence[Task], moved: Sequence[str], *, before_cell: bool) -> str:
    """The one line a cell's output gets about worker servers that were lost and not started again
    (:meth:`TaskServers.not_back`): at the end of the cell that trained on without them, and at the
    start of the next, which renews the cluster (``moved``: where the launcher moved tasks)."""
    who = ", ".join(t.name for t in tasks)
    if not before_cell:
        return (f"[mwnotebook] worker server {who} was lost and could not start again on its address "
                "(its node failed?): the cell trained on with the other worker servers; the next cell "
                "restarts the cluster to bring it back\n")
    where = "; ".join(moved) if moved else "every task started again"
    return (f"[mwnotebook] worker server {who} was not back: the cluster was restarted for this cell "
            f"({where}); a running coordinator takes a worker back only on its old address, and the "
            "last cell's variables are gone\n")


class ParameterServerLost(ClusterRunError):
    """A parameter server died while the cell ran: its variables are gone, the cluster is restarted."""

    def __init__(self, failures: list[WorkerFailure], restarted: bool, detail: str = "") -> None:
        super().__init__(failures, restarted, detail)

    def _render_traceback_(self) -> list[str]:
        lines = [f"\x1b[0;31mParameterServerLost\x1b[0m: {self.detail}", ""]
        lines.append("What the coordinator saw next:" if self.failures else "")
        return lines + super()._render_traceback_()


class TaskServers:
    """Starts, watches and restarts the worker and ps servers of one cluster. Runs on the cluster's loop."""

    def __init__(self, launcher: Launcher, envs: Mapping[Task, dict[str, str]], slots: Mapping[Task, int],
                 startup_timeout: float, late: LateOutput | None = None,
                 on_lost_ps: Callable[[], None] | None = None) -> None:
        self._launcher = launcher
        self._envs = dict(envs)
        self._timeout = startup_timeout
        self._late = late
        self._on_lost_ps = on_lost_ps
        self.servers: dict[Task, Worker] = {}
        #: ``(task, how it ended)`` of the first parameter server lost since :meth:`start`.
        self.lost_ps: tuple[Task, str] | None = None
        self._watch: asyncio.Future[None] | None = None
        #: Each server's launch slot (config/task_placement.py): the launcher starts it on its host.
        self._slots = {task: slots[task] for task in self._envs}
        #: Each server's state for the status view: starting, serving, restarting, lost, stopped.
        self.states: dict[Task, ServerState] = {task: "stopped" for task in self._envs}
        #: How many times each worker server was restarted after it was lost.
        self.restarts_of: dict[Task, int] = {task: 0 for task in self._envs}
        #: Why a task is in its state, where the state alone does not say (:data:`NOT_BACK_NOTE`).
        self.notes: dict[Task, str] = {}

    async def start(self) -> None:
        """Start every server at once and wait until each serves; on any failure none is left running."""
        self.lost_ps = None
        self.notes = {}
        self.states = {task: "starting" for task in self._envs}
        started = await asyncio.gather(*(self._start_one(t) for t in self._envs), return_exceptions=True)
        for task, outcome in zip(self._envs, started):
            if isinstance(outcome, Worker):
                self.servers[task] = outcome
                self.states[task] = "serving"
        errors = [exc for exc in started if isinstance(exc, BaseException)]
        if errors:
            await self.kill()
            raise errors[0]
        self._watch = asyncio.ensure_future(self._watch_loop())

    async def _start_one(self, task: Task) -> Worker:
        env = self._envs[task]
        handle = await self._launcher.start(self._slots[task], env)
        server = Worker(handle, self._late)
        try:
            await server.connect(self._timeout)
            outcome = await server.execute(SERVE_CODE, lambda _m: None, silent=True)
        except BaseException:
            await server.kill()
            raise
        if outcome.status != "ok":
            await server.kill()
            raise ClusterStartError(f"{task.name} could not start its TensorFlow server "
                                    f"({outcome.ename}: {outcome.evalue})")
        log.debug("%s serves (pid %s)", task.name, handle.pid)
        return server

    async def _watch_loop(self) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            for task, server in list(self.servers.items()):
                if await server.handle.is_alive():
                    continue
                how = server.handle.exit_description() or "ended"
                del self.servers[task]
                self.states[task] = "lost" if task.type == "ps" else "restarting"
                await server.kill()
                if task.type == "ps":
                    log.warning("parameter server %s was lost (%s)", task.name, how)
                    if self.lost_ps is None:
                        self.lost_ps = (task, how)
                        if self._on_lost_ps is not None:
                            self._on_lost_ps()
                    continue
                log.warning("worker server %s was lost (%s); restarting it on its address", task.name, how)
                try:
                    self.servers[task] = await self._start_one(task)
                    self.states[task] = "serving"
                    self.restarts_of[task] += 1
                except Exception:
                    self.states[task] = "lost"
                    self.notes[task] = NOT_BACK_NOTE
                    log.exception("could not restart %s", task.name)

    async def kill(self) -> None:
        """End every server now (cluster stop, restart, or a failed start)."""
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
            self._watch = None
        servers, self.servers = list(self.servers.values()), {}
        await asyncio.gather(*(s.kill() for s in servers), return_exceptions=True)
        self.states = {task: "stopped" for task in self._envs}
        self.notes = {}

    def not_back(self) -> tuple[Task, ...]:
        """Worker servers that were lost and could not be started again (their node failed): the
        running coordinator cannot take one back anywhere else, so the next cell renews the cluster."""
        return tuple(t for t in self._envs if t.type == "worker" and self.states.get(t) == "lost")

    async def check_ps_now(self) -> tuple[Task, str] | None:
        """:attr:`lost_ps`, after looking at the parameter servers now: a cell's error can come before
        the watch loop's next look (the coordinator hears of the loss over gRPC at once; measured
        under load: an UnavailableError instead of the cause-first ParameterServerLost). The watch
        loop still ends the lost server; it does not report the loss again."""
        if self.lost_ps is None:
            for task, server in list(self.servers.items()):
                if task.type == "ps" and not await server.handle.is_alive():
                    self.lost_ps = (task, server.handle.exit_description() or "ended")
                    break
        return self.lost_ps

    async def every_ps_alive(self) -> bool:
        """False once a parameter server was lost, also before the watch loop has noticed it."""
        if self.lost_ps is not None:
            return False
        for task in self._envs:
            server = self.servers.get(task)
            if task.type == "ps" and (server is None or not await server.handle.is_alive()):
                return False
        return True

    def pids(self) -> dict[str, int | None]:
        return {task.name: server.handle.pid for task, server in self.servers.items()}

    def hosts(self) -> dict[str, str]:
        """Where each serving server runs (its kernel handle's host): ``{"ps-0": "gpu2", ...}``."""
        return {task.name: server.handle.host for task, server in self.servers.items()}

    def tasks(self) -> tuple[Task, ...]:
        """Every server task, in address order (workers, then parameter servers)."""
        return tuple(self._envs)

    def server(self, task: Task) -> Worker | None:
        """The kernel serving ``task`` now (None while it restarts, after it was lost or stopped)."""
        return self.servers.get(task)
