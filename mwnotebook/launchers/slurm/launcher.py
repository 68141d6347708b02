"""Worker kernels as Slurm job steps.

One allocation per launcher (so per running cluster, kept across cells with the same options):
``--slurm-job J`` or ``SLURM_JOB_ID`` (we are inside an allocation) attach to an existing job, which
is never cancelled by us; otherwise ``salloc --no-shell`` makes one, and :meth:`SlurmLauncher.close`
(stop, kernel exit, any failure to start) cancels it. While the job is pending the queue state is
logged and the start waits, bounded by the start-up timeout (``--timeout``, else 60 s). The job
itself: ``slurm_job.py``.

Every process on a node is the remote agent of ``processes/shipped/remote_agent.py`` (the one SSH workers use),
run as ``srun ... PYTHON -u -c BOOTSTRAP``; its source and configuration (the kernel's signing key
included) travel on srun's stdin, never on a command line. One ``ports`` agent per node holds the
TensorFlow ports; one ``kernel`` agent per worker runs its kernel, which binds the node's own
address (``NodeAddr``), with signed messages. TF_CONFIG lists ``NodeAddr:port`` per worker, ports
chosen on each node.

Every task of the cluster's layout (``--ps``: the coordinator, worker and ps servers; the evaluator)
is placed once the job's nodes are known, by the one rule of ``config/task_placement.py`` with the
job's nodes in order as the hosts and ``--place`` naming node names (in salloc's node list by the rule
of ``config/slurm_options.py`` ``place_node_args``, which an export follows too, and checked against
the job's nodes then); ``start(slot)`` starts that slot's task on its node, and the ports of the
training tasks stay held on their nodes until the next placement, so a lost worker server comes back
on its address.

When workers were lost (``--max-restarts``), :meth:`SlurmLauncher.replace_lost_nodes` moves the
workers of a node that failed to a spare node of the job (``config/slurm_nodes.py``), else asks for
a new allocation when the job is ours; spare nodes get their worker template with the cluster.

Where the Slurm commands run and how kernels are reached (``slurm_shell.py``): by default here, the
notebook host being on the cluster network, reaching each kernel at its node's address; with
``--slurm-login HOST`` on that login node over SSH (srun's stdin/stdout being the SSH session's),
each kernel port reached through an SSH forward from the notebook's loopback to the node's address.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mwnotebook.config import slurm_options as cmd
from mwnotebook.config.roles import RoleLayout, Task
from mwnotebook.config.slurm_nodes import replace_lost
from mwnotebook.config.task_placement import TaskPlacement, place_tasks, placed_by_option
from mwnotebook.config.worker_env import startup_env as spec_startup_env
from mwnotebook.errors import CannotRestartError, ClusterStartError, ConfigError
from mwnotebook.launchers.local.template_pool import templates_disabled
from mwnotebook.launchers.remote.agent_channel import DEFAULT_REQUIRE
from mwnotebook.launchers.remote.agent_events import AgentEvent, gather_port_holders
from mwnotebook.launchers.remote.book import RemoteBook
from mwnotebook.launchers.remote.kernel_handle import RemoteKernelHandle
from mwnotebook.launchers.remote.kernel_start import first_event, start_kernel
from mwnotebook.launchers.remote.template_pool import RemoteTemplate, RemoteTemplates
from mwnotebook.launchers.slurm.agent import SrunAgent
from mwnotebook.launchers.slurm.job import SlurmAllocation, StartAborted
from mwnotebook.launchers.slurm.shell import LocalSlurm, LoginSlurm, SlurmShell

if TYPE_CHECKING:
    from mwnotebook.config.spec import ClusterSpec

__all__ = ["SlurmLauncher", "SrunAgent"]

log = logging.getLogger(__name__)

#: ``0``: no worker template on the allocation's spare nodes until a worker moves there (to measure).
SPARE_TEMPLATE_ENV = "MWNOTEBOOK_SLURM_SPARE_TEMPLATE"


class SlurmLauncher:
    """Starts worker kernels as job steps of one Slurm allocation (see the module docstring)."""

    def __init__(self, *, salloc_args: str | None = "", job_id: str | None = None,
                 workers: int = 2, workers_per_host: int | None = None,
                 gpus_per_worker: int | None = None, python: str | None = None,
                 require: Sequence[str] = DEFAULT_REQUIRE, startup_timeout: float = 60.0,
                 cwd: str | None = None, login: str | None = None, ssh_config: str | None = None,
                 template: bool = True, startup_env: Mapping[str, str] | None = None,
                 layout: RoleLayout | None = None, place: Mapping[str, Sequence[str]] | None = None) -> None:
        self.workers = workers
        #: The cluster's tasks (default: ``workers`` MWMS replicas) and ``--place`` (node names).
        self.layout = layout or RoleLayout(workers=workers)
        self._place = {role: tuple(nodes) for role, nodes in (place or {}).items()}
        if self.layout.workers != workers:
            raise ConfigError(f"the layout has {self.layout.workers} workers but the launcher was made for {workers}")
        self.workers_per_host = workers_per_host
        self.gpus_per_worker = gpus_per_worker
        self.python = python or sys.executable
        self.require = tuple(require)
        self.startup_timeout = startup_timeout
        self.cwd = cwd or os.getcwd()
        self._job_id = cmd.check_job_id(job_id) if job_id else None
        args = cmd.split_salloc_args(salloc_args or "")
        # The --place nodes are in the job: one node list, as an export's (config/slurm_options.py).
        self._place_nodelist = cmd.place_node_args(args, self._place,
                                                   list(placed_by_option(self.layout, self._place).values()))
        args += self._place_nodelist
        self._salloc = cmd.salloc_argv(args, workers, workers_per_host, gpus_per_worker,
                                       job_name=cmd.unique_job_name())
        self.allocation: SlurmAllocation | None = None
        #: The node of each worker slot (MWMS replicas, or a --ps cluster's worker servers).
        self.placement: list[str] = []
        #: Every task's node (config/task_placement.py), once the job's nodes are known.
        self.tasks: TaskPlacement | None = None
        #: The port holders and kernels (launchers/remote/book.py).
        self._book = RemoteBook()
        self._allocating = asyncio.Lock()
        #: Where the Slurm commands run; with a login node, kernel ports are forwarded through it.
        self.shell: SlurmShell = LoginSlurm(login, ssh_config) if login else LocalSlurm()
        self._login = login
        self._abort = asyncio.Event()
        # One worker template per node for the allocation (launchers/remote/template_pool.py). Not with
        # --gpus-per-worker: a forked kernel lives in the template's job step, not in the step that
        # srun gave the worker's GPUs.
        self.use_template = template and gpus_per_worker is None and not templates_disabled()
        self._startup_env = dict(startup_env) if startup_env is not None else None
        self._templates = RemoteTemplates(self.python, self.require, self.cwd)
        #: Lines saying where workers moved since the TF addresses were last reserved.
        self._moved: list[str] = []

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> SlurmLauncher:
        login = spec.slurm_login
        inside = os.environ.get("SLURM_JOB_ID") if not spec.slurm and not login else None
        return cls(salloc_args=spec.slurm, job_id=spec.slurm_job or inside, workers=spec.workers,
                   workers_per_host=spec.workers_per_host, gpus_per_worker=spec.gpus_per_worker,
                   python=spec.python, startup_timeout=spec.startup_timeout, login=login,
                   template=spec.template, startup_env=spec_startup_env(spec), layout=spec.layout,
                   place=spec.place)

    def abort_start(self) -> None:
        """Ctrl-C during a start: a wait in Slurm's queue ends now and the pending job is cancelled
        (called by the engine before it waits for the start to wind down)."""
        self._abort.set()

    @property
    def job_id(self) -> str | None:
        return self.allocation.job_id if self.allocation else self._job_id

    async def _allocate(self, refresh: bool = False) -> SlurmAllocation:
        """The allocation; with ``refresh`` (a fresh start, new TF addresses) a new one replaces
        one that has ended. Restarts never re-allocate: their TF_CONFIGs name the old nodes."""
        async with self._allocating:
            return await self._allocate_locked(refresh)

    async def _allocate_locked(self, refresh: bool) -> SlurmAllocation:
        if refresh and self.allocation is not None and await self.allocation.ended():
            # A fresh start after the job ended (time limit, scancel): a new allocation if it was ours.
            old, self.allocation = self.allocation, None
            await old.release()
            if self._job_id:
                raise ClusterStartError(f"Slurm job {old.job_id} has ended ({old.state}); make a new "
                                        "allocation and pass its id with --slurm-job")
            log.warning("Slurm job %s has ended (%s); requesting a new allocation", old.job_id, old.state)
        if self.allocation is None:
            if self._job_id:
                self.allocation = await SlurmAllocation.attach(self._job_id, self.shell, self._abort)
            else:
                self.allocation = await self._request()
            try:
                self.place_tasks_on(self.allocation)
            except BaseException:
                old, self.allocation = self.allocation, None
                await old.release()
                raise
        return self.allocation

    async def _request(self) -> SlurmAllocation:
        """salloc; when it refuses a node list that ``--place`` added, the error says which option named it."""
        try:
            return await SlurmAllocation.request(self._salloc, self.startup_timeout, self.shell, self._abort)
        except StartAborted:
            raise
        except ClusterStartError as exc:
            if not self._place_nodelist:
                raise
            options = " ".join(f"--place {role}={','.join(nodes)}" for role, nodes in self._place.items())
            asked = f"{options} asked Slurm for those nodes ({self._place_nodelist[0]})"
            if str(exc).startswith("salloc failed"):
                raise ClusterStartError(f"{exc}; {asked}: name nodes of this cluster (`sinfo -N` lists them)") from exc
            if "was not granted within" in str(exc):  # a placed node down, drained or busy keeps the job pending
                raise ClusterStartError(f"{exc}; {asked}, and the job waits for all of them: `sinfo -N` shows "
                                        "whether one is down, drained or busy; place those tasks elsewhere "
                                        "(change or drop --place) or wait for it") from exc
            raise

    def place_tasks_on(self, allocation: SlurmAllocation) -> None:
        """Every task's node on this job: the worker slots over its nodes, the rest by the rule of
        config/task_placement.py, ``--place`` naming nodes of this job (ConfigError naming them)."""
        nodes = list(allocation.nodes)
        for role, named in self._place.items():
            unknown = [node for node in named if node not in nodes]
            if unknown:
                raise ConfigError(
                    f"--place {role}={','.join(named)}: {', '.join(unknown)} "
                    f"{'is not a node' if len(unknown) == 1 else 'are not nodes'} of Slurm job "
                    f"{allocation.job_id}, whose nodes are {', '.join(nodes)}; name one of those")
        self.placement = cmd.place_workers(nodes, self.workers, self.workers_per_host)
        self.tasks = place_tasks(self.layout, self.placement, nodes, self._place)

    def _task_order(self) -> list[Task]:
        """Every task, training tasks in address order then the evaluator (what moves with a node)."""
        return [*self.layout.training_tasks(), *(t for t in self.layout.cell_tasks() if t.type == "evaluator")]

    def gpus_of(self, slot: int) -> int | None:
        """``--gpus-per-worker`` for the step of a task that computes (a replica, a worker server, the
        evaluator); none for a --ps cluster's coordinator and parameter servers, which see no GPU
        (config/worker_env.py) and must not take the workers' GPUs from the job."""
        if self.gpus_per_worker is None or self.tasks is None:
            return self.gpus_per_worker
        task = self.tasks.task_at(slot)
        return None if self.layout.parameter_server and task.type in ("chief", "ps") else self.gpus_per_worker

    def node_of(self, slot: int) -> str:
        """The node that runs launch slot ``slot``'s task (config/task_placement.py ``launch_slots``)."""
        if self.tasks is None:
            raise ConfigError(f"launch slot {slot} has no node: the Slurm job's nodes are not known yet")
        return self.tasks.host_of_slot(slot)

    async def tf_addresses(self, count: int) -> list[str]:
        """Allocate (or attach), then hold one TF port per training task on each task's node."""
        training = self.layout.training_tasks()
        if count != len(training):
            raise ConfigError(f"{count} TensorFlow tasks requested but the launcher was made for "
                              f"{len(training)} ({', '.join(t.name for t in training)})")
        allocation = await self._allocate(refresh=True)
        await self._release_ports()
        assert self.tasks is not None
        by_node: dict[str, list[int]] = {}
        for index, node in enumerate(self.tasks.address_hosts()):
            by_node.setdefault(node, []).append(index)
        addresses = [""] * count

        async def reserve(node: str, indices: list[int]) -> None:
            agent = await SrunAgent.start(self.shell, allocation.job_id, node, self.python)
            if self._startup_env is not None:
                self._template(node, self._startup_env)  # imports TensorFlow while the rest starts
            await self._book.reserve_ports(agent, indices, self.require,
                                           lambda: self._first_event(agent, node, self.startup_timeout),
                                           lambda _: allocation.addresses.get(node, node), addresses)

        await gather_port_holders((reserve(n, ix) for n, ix in by_node.items()), self._release_ports)
        used = set(self.tasks.distinct_hosts())
        if self._startup_env is not None:
            for node in used - set(by_node):  # a node with no TF port: the evaluator's
                self._template(node, self._startup_env)
        if self._startup_env is not None and os.environ.get(SPARE_TEMPLATE_ENV) != "0":
            # A spare node's template imports TensorFlow now, so that a worker moved there after its
            # node failed starts as fast as one restarted in place (benchmarks/faults.py node-loss).
            for spare in (n for n in allocation.nodes if n not in used):
                self._template(spare, self._startup_env)
        log.info("TensorFlow addresses: %s", addresses)
        self._moved = []
        return addresses

    async def replace_lost_nodes(self) -> list[str]:
        """Before fresh workers start after a loss (``--max-restarts``): the workers of a node that
        left the job (failed, in a ``--no-kill`` job) or cannot run steps (DOWN, DRAIN) move to a
        spare node of the job (``config/slurm_nodes.py``). No spare, or the job ended: a new
        allocation if it is ours; if the user gave the job (``--slurm-job``, ``SLURM_JOB_ID``) we
        never make one, and end with :class:`CannotRestartError`. Returns the moves' lines."""
        async with self._allocating:
            allocation = self.allocation
            if allocation is None:
                return self._moved
            healthy = await allocation.usable_nodes()
            if healthy is None:
                state = f" ({allocation.state})" if allocation.state != "ENDED" else ""  # ENDED: gone from squeue
                what = f"Slurm job {allocation.job_id} has ended{state}"
                return await self._reallocate(allocation, what, "make a new allocation and pass its id")
            order = self._task_order()
            assert self.tasks is not None
            # every task moves with its node; plain workers keep the words "worker i"
            names = [t.name for t in order] if self.layout.parameter_server or self.layout.evaluator else None
            plan = replace_lost([self.tasks.host_of(t) for t in order], healthy, names)
            if plan.placement is not None:
                if plan.moves:
                    moved = dict(zip(order, plan.placement))
                    self.tasks = TaskPlacement(self.layout, moved)
                    slots = [moved[t] for t in self.layout.server_tasks() if t.type == "worker"]
                    self.placement = slots or [moved[t] for t in self.layout.training_tasks()]
                    self._moved += [move.line() for move in plan.moves]
                    log.warning("Slurm job %s: %s", allocation.job_id, "; ".join(m.line() for m in plan.moves))
                return self._moved
            lost = ", ".join(plan.unplaced)
            return await self._reallocate(
                allocation, f"node {lost} lost; no spare node in allocation {allocation.job_id}",
                "ask for more nodes than workers (e.g. salloc -N 3 --no-kill for 2 workers) to have a spare "
                "node, or pass a new job's id")

    async def _reallocate(self, old: SlurmAllocation, what: str, hint: str) -> list[str]:
        """Replace the job ``old`` by a new allocation (the lock held); the job given by the user: never."""
        if self._job_id:
            raise CannotRestartError(f"{what}; the job was given (--slurm-job {old.job_id} or "
                                     f"SLURM_JOB_ID), so mwnotebook makes no new allocation: {hint} "
                                     "with --slurm-job")
        log.warning("%s: requesting a new allocation", what)
        self.allocation = None
        await self._release_ports()
        await old.release()
        new = await self._allocate_locked(refresh=False)
        self._moved.append(f"{what}; new allocation {new.job_id}")
        return self._moved

    async def _first_event(self, agent: SrunAgent, node: str, timeout: float) -> AgentEvent:
        return await first_event(agent, node, timeout, self.python, silent="the job step",
                                 explain_end=self._explain_end)

    async def _explain_end(self, reason: str) -> str:
        """Why an agent ended: the job's end when that was it, else what the agent left on stderr."""
        if self.allocation is not None and await self.allocation.ended():
            return (f"Slurm job {self.allocation.job_id} has ended ({self.allocation.state}); "
                    + ("the next cell requests a new allocation" if not self._job_id
                       else "pass a running job's id with --slurm-job"))
        return reason

    async def _release_ports(self) -> None:
        await self._book.release_ports()

    def _describe_loss(self, node: str) -> str:
        """Why a kernel on ``node`` is gone when its agent's channel closed without an exit event."""
        lost = self.shell.lost()
        if lost:
            return f"lost the SSH connection to the login node: {lost}"
        return f"its Slurm job step on {node} ended (job cancelled or node lost?)"

    async def start(self, index: int, env: Mapping[str, str]) -> RemoteKernelHandle:
        """Start the kernel of launch slot ``index`` as a job step on its task's node."""
        allocation = await self._allocate()
        node = self.node_of(index)
        address = allocation.addresses.get(node, node)
        key = str(uuid.uuid4())
        agent = await SrunAgent.start(self.shell, allocation.job_id, node, self.python, self.gpus_of(index))
        try:
            # direct: the node's own port; via a login node: a local forward (slurm/shell.py)
            started = await start_kernel(
                agent, where=node, key=key, env=env, require=self.require, cwd=self.cwd,
                timeout=self.startup_timeout, template=self._template(node, env),
                wait=lambda seconds: self._first_event(agent, node, seconds),
                forward=lambda port: self.shell.forward(address, port), bind_ip=address)
        except ClusterStartError as exc:
            exc.worker = index
            raise
        handle = self._book.keep(RemoteKernelHandle(index, node, agent, started.pid, started.listeners, started.info,
                                                    remote_dir=started.remote_dir,
                                                    describe_loss=lambda: self._describe_loss(node)))
        log.info("slot %d (%s): kernel pid %s on %s (job %s)", index, self.tasks.task_at(index).name if self.tasks
                 else index, handle.pid, node, allocation.job_id)
        return handle

    def _template(self, node: str, env: Mapping[str, str]) -> RemoteTemplate | None:
        """The worker template for ``env`` on ``node`` (a job step kept for the allocation); None when off."""
        if not self.use_template or self.allocation is None:
            return None
        job_id = self.allocation.job_id  # a new allocation (the old one ended) gets new templates
        shell = self.shell
        return self._templates.get((job_id, node), node, env,
                                   lambda: SrunAgent.start(shell, job_id, node, self.python))

    @property
    def templates(self) -> list[RemoteTemplate]:
        return self._templates.templates()

    @property
    def owns_allocation(self) -> bool:
        """Whether this launcher made the job its workers run in (salloc) and cancels it when it
        closes; False for a job the user gave (``--slurm-job``, or ``SLURM_JOB_ID`` inside ``salloc``)
        and before there is one. Only an owned job may be cancelled by anyone else (the clusters
        panel's sweep, registry/orphans.py)."""
        return self.allocation is not None and self.allocation.owned

    async def status(self) -> dict[str, Any]:
        """Job id, nodes, the job's state, whether we own it (``owned``: :attr:`owns_allocation`) and
        the login node the Slurm commands run on (``login``, None here), for ``%mwcluster status``
        and the clusters panel."""
        if self.allocation is None:
            return {"job_id": self._job_id, "nodes": [], "state": "not allocated", "owned": False,
                    "login": self._login}
        return {"job_id": self.allocation.job_id, "nodes": list(self.allocation.nodes),
                "state": await self.allocation.current_state(), "owned": self.owns_allocation,
                "login": self._login}

    async def close(self) -> None:
        """Kill every kernel, release the ports, and cancel the allocation if we made it."""
        await self._book.kill_kernels()
        await self._release_ports()
        await self._templates.close()
        allocation, self.allocation = self.allocation, None
        if allocation is not None:
            await allocation.release()
        await self.shell.close()
