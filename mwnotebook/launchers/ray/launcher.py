"""Worker kernels on a running Ray cluster (``%%mwtrain --ray ADDRESS``).

Ray only places and supervises processes here; the workers are the same as everywhere else. One
placement group of N bundles (``--cpus-per-worker``, ``--gpus-per-worker``; ``--ray-strategy``,
SPREAD by default), one small relay actor per node (``node_relay.py``: the node's own, kept with its
worker template by ``node_templates.py``; one per bundle instead with GPUs, whose ids Ray shows
inside the bundle only, or without templates), and through each relay the remote agent that SSH and
Slurm workers use (``processes/shipped/remote_agent.py``): a ``ports`` agent holds the worker's
TensorFlow port, a ``kernel`` agent starts the kernel bound to the node's address and obeys
interrupt/stacks/kill. TF_CONFIG lists the bundles' node addresses and those ports, in bundle order.

Reaching the kernels: by default directly, at the node's address; the notebook runs inside the
cluster's network (a pod beside a KubeRay cluster, the head node, a VM on the cluster's network).
Ray forwards no arbitrary ports, so from off that network ``--ray-ssh HOST`` (``ssh_jump.py``)
reaches each relay and each kernel port through a local SSH forward over one connection to HOST
(the head), and a ``ray://`` address too; the SSH connection is made before anything is placed and
closed with the cluster.

Worker templates: one per node and start-up environment, through the same code as SSH hosts and
Slurm nodes (``launchers/remote/template_pool.py``): the remote agent in its ``template`` role, started
through a relay of its own on that node (``node_templates.py``), imports TensorFlow once (all nodes in
parallel, while the ports are reserved), and every worker's agent on that node forks its kernel from
it. A worker restarted after it was lost is a fork too, and so are a later cluster's workers: the
templates are kept for the notebook's process (ended with it, SIGKILL included; ``--ray-ssh``: with
the cluster). Its memory (``config/class_caps.py`` ``MEASURED.template``, about 0.45 GB) is a per-node overhead outside
the bundles' Ray resources, as Ray's own per-node processes are (docs/guide/ray.md).

Lifecycle: :meth:`RayLauncher.close` (cluster stop, a failed start) closes the agents' connections
(they kill their kernels), stops and kills the bundles' relays (the nodes' stay with their
templates) and removes the placement group. If the
notebook's process dies (SIGKILL included), Ray ends the actors the driver owned and the group, and
the agents die with their relay (``node_relay.py``); their connections also close. A node lost
mid-cell fails its relay's ``wait`` call, which closes that worker's channel: the cell fails fast.
With ``--max-restarts``, :meth:`RayLauncher.replace_lost_nodes` waits (bounded) until Ray has placed
the lost bundles again on live nodes, starts relays there, and the workers come back with new TF
addresses.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mwnotebook.config.ray_options import DEFAULT_CPUS_PER_WORKER
from mwnotebook.config.worker_env import startup_env as spec_startup_env
from mwnotebook.errors import CannotRestartError, ClusterStartError, ConfigError
from mwnotebook.launchers.local.template_pool import templates_disabled
from mwnotebook.launchers.ray import node_relay
from mwnotebook.launchers.ray.channel import RelayAgent
from mwnotebook.launchers.ray.node_templates import NodeTemplates, notebook_templates
from mwnotebook.launchers.ray.session import Placement, RaySession, head_endpoint
from mwnotebook.launchers.ray.ssh_jump import JumpHost
from mwnotebook.launchers.remote.agent_channel import BOOTSTRAP, DEFAULT_REQUIRE
from mwnotebook.launchers.remote.agent_events import AgentEvent, gather_port_holders
from mwnotebook.launchers.remote.book import RemoteBook
from mwnotebook.launchers.remote.kernel_handle import Listener, RemoteKernelHandle
from mwnotebook.launchers.remote.kernel_start import first_event, start_kernel
from mwnotebook.launchers.remote.template_pool import RemoteTemplate

if TYPE_CHECKING:
    from mwnotebook.config.spec import ClusterSpec

__all__ = ["RayLauncher"]

log = logging.getLogger(__name__)

#: Calls to a relay that answer at once (``where``, ``stop``); a relay's first call also waits for
#: its Ray worker process to start (importing Ray on a loaded node takes seconds).
RELAY_CALL_SECONDS = 60.0
#: Thread-count variables a worker gets from its bundle's CPUs unless ``--env`` gives them (Ray sets
#: OMP_NUM_THREADS for the actor only; the relay does not pass it on).
THREAD_ENV = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


def describe_loss(jump: JumpHost | None, node_ip: str) -> str:
    """Why a worker on ``node_ip`` is gone when its agent's channel closed without an exit event:
    ``--ray-ssh``'s lost connection (``jump``), else its node or relay."""
    lost = jump.lost() if jump is not None else ""
    if jump is not None and lost:
        return (f"the SSH connection to {jump.target} (--ray-ssh) was lost ({lost}), and the worker's "
                "channels through it")
    return (f"its Ray node {node_ip} or its relay actor is gone (node lost, or the actor was "
            "killed); the worker's agent channel closed")


class _Relay:
    """One worker's relay actor (its bundle's, or its node's kept one) and where to reach it."""

    def __init__(self, actor: Any, where: dict[str, Any], node_ip: str, token: str = "", kept: bool = False) -> None:
        self.actor = actor
        self.where = where
        self.node_ip = node_ip
        #: The token the relay was made with; ``kept``: the node's relay of node_templates.py (not ours to end).
        self.token = token
        self.kept = kept


class RayLauncher:
    """Starts worker kernels in a Ray placement group (see the module docstring)."""

    def __init__(self, address: str, *, workers: int = 2, cpus_per_worker: int | None = None,
                 gpus_per_worker: int | None = None, strategy: str = "SPREAD", python: str | None = None,
                 require: Sequence[str] = DEFAULT_REQUIRE, startup_timeout: float = 60.0,
                 cwd: str | None = None, ray_ssh: str | None = None, template: bool = True,
                 startup_env: Mapping[str, str] | None = None, kept: NodeTemplates | None = None) -> None:
        self.address = address
        self.workers = workers
        self.cpus = cpus_per_worker or DEFAULT_CPUS_PER_WORKER
        self.gpus = gpus_per_worker
        self.strategy = strategy
        self.python = python
        self.require = tuple(require)
        self.startup_timeout = startup_timeout
        self.cwd = cwd or os.getcwd()
        self.session = RaySession(address)  # Ray missing: a ConfigError now, before anything starts
        #: ``--ray-ssh``: the relays and kernels are reached through SSH forwards (ssh_jump.py).
        self.jump = JumpHost(ray_ssh) if ray_ssh else None
        self._token = secrets.token_hex(node_relay.TOKEN_CHARS // 2)
        self._placement: Placement | None = None
        self._relays: list[_Relay] = []
        #: The port holders and kernels (launchers/remote/book.py).
        self._book = RemoteBook()
        self._placing = asyncio.Lock()
        self._aborted = False
        #: Fork workers from a template per node (see the module docstring); ``startup_env`` (the
        #: environment all workers share) lets tf_addresses start them before the workers' turn.
        self.use_template = template and not templates_disabled()
        self._startup_env = dict(startup_env) if startup_env is not None else None
        #: Where the node templates are kept: for the notebook's process, unless given (``--ray-ssh``:
        #: a private instance, ended with the cluster, as its SSH connection is).
        self._private_templates = kept is not None or self.jump is not None
        self._kept = kept if kept is not None else NodeTemplates() if self.jump is not None else notebook_templates()
        self._used: list[RemoteTemplate] = []

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> RayLauncher:
        assert spec.ray is not None
        return cls(spec.ray.strip(), workers=spec.workers, cpus_per_worker=spec.cpus_per_worker,
                   gpus_per_worker=spec.gpus_per_worker, strategy=spec.ray_strategy, python=spec.python,
                   startup_timeout=spec.startup_timeout, ray_ssh=spec.ray_ssh, template=spec.template,
                   startup_env=spec_startup_env(spec))

    def abort_start(self) -> None:
        """Ctrl-C during a start: a wait for Ray's placement ends now."""
        self._aborted = True

    @property
    def node_ips(self) -> list[str]:
        """The node address of each worker's bundle, in bundle order ([] before the first start)."""
        return [r.node_ip for r in self._relays]

    @property
    def handles(self) -> list[RemoteKernelHandle]:
        """The kernels started and not ended (where the notebook reaches each: ``connection_info``)."""
        return self._book.handles

    async def _place(self) -> list[_Relay]:
        """Connect, reserve the placement group and start one relay per bundle (once)."""
        async with self._placing:
            if self._relays:
                self._check_connected()
                return self._relays
            self._aborted = False
            if self.jump is not None:
                await self._through_ssh()
            await self._kept.use(self.session.resolved, self.session)
            await self.session.connect(self.startup_timeout)
            placement = Placement(self.session, self.workers, self.cpus, self.gpus, self.strategy)
            self._placement = placement
            await placement.reserve(self.startup_timeout, lambda: self._aborted)
            log.debug("placement group placed on %s", placement.node_ips)
            if self._startup_env is not None:  # the nodes import TensorFlow while the relays start
                for index in range(self.workers):
                    self._template(index, self._thread_env(self._startup_env))
            if self._shares_node_relays:
                self._relays = await self._node_relays(placement, range(self.workers))
                log.info("Ray placement group ready: bundles on %s (through the nodes' relays)", placement.node_ips)
                return self._relays
            ray = self.session.ray
            actors = self._relay_actors(placement, range(self.workers))
            try:
                wheres = await asyncio.gather(*(self.session.get(a.where.remote(), RELAY_CALL_SECONDS)
                                                for a in actors))
            except Exception as exc:
                for actor in actors:
                    ray.kill(actor)
                await placement.remove()
                raise ClusterStartError(f"the relay actors did not start on the Ray cluster: "
                                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
            self._relays = [_Relay(a, w, ip, self._token) for a, w, ip in zip(actors, wheres, placement.node_ips)]
            log.info("Ray placement group ready: bundles on %s", placement.node_ips)
            return self._relays

    @property
    def _shares_node_relays(self) -> bool:
        """Workers' agents start through their node's kept relay (node_templates.py), not a relay in
        their bundle: CPU bundles only (a GPU bundle's devices are known inside it only). The group
        still holds each bundle's CPUs; a second cluster then starts no Ray actor at all."""
        return self.use_template and not self.gpus

    async def _node_relays(self, placement: Placement, indices: Sequence[int]) -> list[_Relay]:
        """The kept relays of the nodes of bundles ``indices`` (started where there is none; one that
        does not answer, killed since, is started again)."""
        async def node_relay(node_id: str, node_ip: str) -> tuple[Any, dict[str, Any]]:
            actor, where = await self._kept.relay(self.session, node_id, node_ip, self.python)
            try:
                await self.session.get(actor.where.remote(), 10)
            except Exception:
                self._kept.forget(node_id)
                actor, where = await self._kept.relay(self.session, node_id, node_ip, self.python)
            return actor, where

        nodes = {placement.node_ids[i]: placement.node_ips[i] for i in indices}
        try:
            found = await asyncio.wait_for(asyncio.gather(*(node_relay(n, ip) for n, ip in nodes.items())),
                                           RELAY_CALL_SECONDS)
            started = [dict(zip(nodes, found))[placement.node_ids[i]] for i in indices]
        except Exception as exc:
            await placement.remove()
            raise ClusterStartError(f"the relay actors did not start on the Ray cluster: "
                                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        return [_Relay(actor, where, placement.node_ips[i], self._kept.token, kept=True)
                for i, (actor, where) in zip(indices, started)]

    def _check_connected(self) -> None:
        """A :class:`ClusterStartError` when the SSH connection or Ray's was lost since the relays started."""
        if self.jump is not None:
            self.jump.check()
        if not self.session.connected():
            raise ClusterStartError(f"--ray {self.address}: the connection to the Ray cluster was lost, and the "
                                    "workers with it; stop the cluster (%mwcluster stop) and start it again")

    async def _through_ssh(self) -> None:
        """``--ray-ssh``: connect to the SSH host first (a refusal fails the start before anything
        is placed); a ``ray://`` address is then reached through a forward too."""
        assert self.jump is not None
        await self.jump.connect()
        resolved = self.session.resolved
        endpoint = head_endpoint(resolved) if resolved.startswith("ray://") else None
        if endpoint is None or self.session.via is not None:
            return
        why = await self.jump.probe(*endpoint)
        if why:
            raise ClusterStartError(f"--ray {self.address}: nothing answers at {endpoint[0]}:{endpoint[1]} as "
                                    f"{self.jump.target} (--ray-ssh) sees it ({why}); is the Ray head running "
                                    "and is this its Ray Client address (ray://HOST:10001, HOST as the SSH "
                                    "host reaches it, e.g. localhost on the head)?")
        ip, port = await self.jump.route(*endpoint)
        jump = self.jump
        self.session.reach_at(f"ray://{ip}:{port}", lambda: bool(jump.lost()))

    def _relay_actors(self, placement: Placement, indices: Sequence[int]) -> list[Any]:
        ray = self.session.ray
        ray.cloudpickle.register_pickle_by_value(node_relay)  # the nodes need no mwnotebook
        relay_class = ray.remote(node_relay.NodeRelay)
        return [relay_class.options(
            num_cpus=self.cpus, num_gpus=self.gpus or 0, max_concurrency=32, max_restarts=0,
            scheduling_strategy=placement.scheduling(i),
        ).remote(placement.node_ips[i], self._token, BOOTSTRAP, self.python) for i in indices]

    async def _relays_alive(self) -> list[bool]:
        async def alive(relay: _Relay) -> bool:
            try:
                await self.session.get(relay.actor.where.remote(), 10)
                return True
            except Exception:
                return False

        return list(await asyncio.gather(*(alive(r) for r in self._relays)))

    async def replace_lost_nodes(self) -> list[str]:
        """Before fresh workers start after a loss (``--max-restarts``): the bundles of a lost node
        come back where Ray places them again (bounded by the start-up timeout), each with a new
        relay. Returns one line per move; [] when every relay is alive. Raises
        :class:`CannotRestartError` when Ray cannot place them."""
        async with self._placing:
            placement = self._placement
            if placement is None or not self._relays:
                return []
            try:
                self._check_connected()
            except ClusterStartError as exc:
                raise CannotRestartError(str(exc)) from None
            lost = [i for i, ok in enumerate(await self._relays_alive()) if not ok]
            if not lost:
                return []
            ray = self.session.ray
            for i in lost:
                if self._relays[i].kept:
                    continue  # gone with its node; its workers come back through bundle relays
                try:
                    ray.kill(self._relays[i].actor)
                except Exception:
                    log.debug("ray.kill of a lost relay failed", exc_info=True)
            old = [self._relays[i].node_ip for i in lost]
            if await placement.replaced(self.startup_timeout) is None:
                raise CannotRestartError(
                    f"Ray node(s) {', '.join(sorted(set(old)))} lost, and Ray did not place worker(s) "
                    f"{', '.join(map(str, lost))} again within {self.startup_timeout:.0f} s: the other nodes "
                    "lack free resources for the bundles (add a node, or use fewer --cpus-per-worker)")
            actors = self._relay_actors(placement, lost)
            wheres = await asyncio.gather(*(self.session.get(a.where.remote(), RELAY_CALL_SECONDS) for a in actors))
            relays = [_Relay(a, w, placement.node_ips[i], self._token) for i, a, w in zip(lost, actors, wheres)]
            moves = []
            for i, relay, was in zip(lost, relays, old):
                self._relays[i] = relay
                moves.append(f"worker {i}: Ray node {was} lost; its bundle is now on {placement.node_ips[i]}")
            log.warning("; ".join(moves))
            return moves

    async def _agent(self, index: int) -> RelayAgent:
        relay = self._relays[index]
        try:
            address = (await self.jump.route(str(relay.where["ip"]), int(relay.where["port"]))
                       if self.jump is not None else None)
            return await RelayAgent.start(relay.where, relay.token, relay.actor, relay.node_ip, self.session.wrap,
                                          address, self.session.connected)
        except ConnectionError as exc:
            raise ClusterStartError(str(exc), worker=index, host=relay.node_ip) from None

    async def _first_event(self, agent: RelayAgent, index: int, timeout: float) -> AgentEvent:
        """The agent's first event (``remote/kernel_start.py`` :func:`first_event`), its
        :class:`ClusterStartError` naming the worker too."""
        python = self.python or str(self._relays[index].where.get("python", "python3"))
        try:
            return await first_event(agent, agent.host, timeout, python)
        except ClusterStartError as exc:
            exc.worker = index
            raise

    async def tf_addresses(self, count: int) -> list[str]:
        """Place the bundles, then hold one TF port per worker on its bundle's node."""
        if count != self.workers:
            raise ConfigError(f"{count} workers requested but the launcher was made for {self.workers}")
        relays = await self._place()
        await self._release_ports()
        addresses = [""] * count

        async def reserve(index: int) -> None:
            agent = await self._agent(index)
            await self._book.reserve_ports(agent, [index], self.require,
                                           lambda: self._first_event(agent, index, self.startup_timeout),
                                           lambda _: relays[index].node_ip, addresses)

        await gather_port_holders((reserve(i) for i in range(count)), self._release_ports)
        log.info("TensorFlow addresses: %s", addresses)
        return addresses

    def _thread_env(self, env: Mapping[str, str]) -> dict[str, str]:
        out = dict(env)
        for name in THREAD_ENV:
            out.setdefault(name, str(self.cpus))
        return out

    def _kernel_env(self, index: int, env: Mapping[str, str]) -> dict[str, str]:
        out = self._thread_env(env)
        gpus = self._relays[index].where.get("gpus")
        if self.gpus and gpus is not None:
            out["CUDA_VISIBLE_DEVICES"] = str(gpus)  # the GPUs Ray gave this bundle
        return out

    async def start(self, index: int, env: Mapping[str, str]) -> RemoteKernelHandle:
        relays = await self._place()
        if not 0 <= index < len(relays):
            raise ConfigError(f"worker {index} has no bundle in the placement group ({len(relays)} bundles)")
        node_ip = relays[index].node_ip
        key = secrets.token_hex(16)
        kernel_env = self._kernel_env(index, env)
        agent = await self._agent(index)

        async def forward(port: int) -> tuple[str, int, Listener | None]:
            if self.jump is not None:  # --ray-ssh: a local forward to the node's address
                return await self.jump.forward(node_ip, port)
            return node_ip, port, None  # the kernel binds the node's address: reached directly

        try:
            started = await start_kernel(
                agent, where=node_ip, key=key, env=kernel_env, require=self.require,
                cwd=self.cwd, timeout=self.startup_timeout, template=self._template(index, kernel_env),
                wait=lambda seconds: self._first_event(agent, index, seconds), forward=forward, bind_ip=node_ip)
        except ClusterStartError as exc:
            exc.worker = index
            raise
        jump = self.jump
        handle = self._book.keep(RemoteKernelHandle(index, node_ip, agent, started.pid, started.listeners, started.info,
                                                    remote_dir=started.remote_dir,
                                                    describe_loss=lambda: describe_loss(jump, node_ip)))
        log.info("worker %d: kernel pid %s on Ray node %s (bundle %d)", index, handle.pid, node_ip, index)
        return handle

    def _template(self, index: int, env: Mapping[str, str]) -> RemoteTemplate | None:
        """The worker template for ``env`` on worker ``index``'s node (kept from an earlier cluster,
        or started now: ``node_templates.py``); None when off."""
        placement = self._placement
        if not self.use_template or placement is None or len(placement.node_ids) <= index:
            return None
        template = self._kept.template(self.session, placement.node_ids[index], placement.node_ips[index],
                                       env, python=self.python, require=self.require, cwd=self.cwd)
        if template not in self._used:
            self._used.append(template)
        return template

    @property
    def templates(self) -> list[RemoteTemplate]:
        """The worker templates this launcher's workers fork from (one per node and start-up environment)."""
        return list(self._used)

    async def _release_ports(self) -> None:
        await self._book.release_ports()

    async def close(self) -> None:
        """Kill every kernel, release the ports, end the relays and remove the placement group."""
        await self._book.kill_kernels()
        await self._release_ports()
        self._used = []
        if self._private_templates:
            await self._kept.close()
        relays, self._relays = [r for r in self._relays if not r.kept], []  # the kept ones stay with the templates
        ray = self.session.ray
        if relays and self.session.connected():
            stops = [self.session.get(r.actor.stop.remote(), 10) for r in relays]
            await asyncio.gather(*stops, return_exceptions=True)
            for relay in relays:
                try:
                    await asyncio.wait_for(asyncio.to_thread(ray.kill, relay.actor), 10)
                except Exception:  # already gone with its node, or the head is gone
                    log.debug("ray.kill of a relay failed", exc_info=True)
        placement, self._placement = self._placement, None
        if placement is not None:
            await placement.remove()
        if self._private_templates or not self._kept.keep(self.session):
            await self.session.close()  # else Ray's connection stays with the kept templates
        jump = self.jump
        if jump is not None:
            self.jump = JumpHost(jump.spec)  # a later start connects afresh; a start still running sees "stopping"
            await jump.close()
