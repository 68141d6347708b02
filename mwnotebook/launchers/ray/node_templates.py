"""Worker templates kept per Ray node for the life of the notebook's process.

A cluster's placement group and its relays end with the cluster, and an agent dies with its relay
(``node_relay.py``). So a node's template is started through a relay of its own: one more
:class:`~mwnotebook.launchers.ray.node_relay.NodeRelay` actor per node, pinned to that node (node
affinity, not soft), holding no CPUs, outside every placement group. A second cluster of the same
notebook on the same Ray cluster (other options, another worker count) forks its workers from the
templates the first one started, as local workers share ``launchers/local/template_pool.py``'s
templates for the notebook's process. (SSH hosts and Slurm nodes keep theirs per cluster:
``launchers/remote/template_pool.py``; a Slurm job's nodes end with it.) CPU workers' own agents
start through the same relay (``launcher.py``): the placement group holds their CPUs, so a second
cluster starts no Ray actor at all.

The templates themselves are the remote agent in its ``template`` role, through the same code as
SSH and Slurm (``launchers/remote/template_pool.py`` :class:`RemoteTemplates`), keyed by node and
start-up environment.

Lifecycle. Ray ends the actors a driver owns when the driver ends, SIGKILL included, and the
agents die with their relay; so the notebook's Ray connection is kept after a cluster stops while
templates are kept (:meth:`NodeTemplates.keep`), and ended with them. They end:

* with the notebook's process (Ray ends the relays; each template's agent connection closes too);
* when a cluster of this notebook uses another Ray address, or Ray's connection was lost
  (:meth:`NodeTemplates.use`);
* by :meth:`NodeTemplates.close` (``--ray-ssh`` clusters keep a private instance, closed with the
  cluster: their SSH connection ends with it).

A template that ended (its node lost, its relay killed) is replaced by a new relay and template on
that node the next time a worker needs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.ray import node_relay
from mwnotebook.launchers.ray.channel import RelayAgent
from mwnotebook.launchers.ray.session import RaySession
from mwnotebook.launchers.remote.agent_channel import BOOTSTRAP
from mwnotebook.launchers.remote.template_pool import RemoteTemplate, RemoteTemplates
from mwnotebook.shared.process_wide import ProcessWide

__all__ = ["NodeTemplates", "notebook_templates"]

log = logging.getLogger(__name__)

#: A kept relay's first call also waits for its Ray worker process to start.
RELAY_START_SECONDS = 60.0
#: A bound on Ray's calls when the kept relays end.
STOP_SECONDS = 10.0


class _KeptNode:
    """One node's kept relay (started in the background) and its number (:attr:`NodeTemplates._generations`)."""

    def __init__(self, node_ip: str, generation: int, start: asyncio.Task[tuple[Any, dict[str, Any]]]) -> None:
        self.node_ip = node_ip
        self.generation = generation
        self.start = start
        #: Templates started again on this relay after one ended.
        self.attempt = 0

    def actor(self) -> Any:
        """The relay actor once started; None before, or when it could not start."""
        task = self.start
        return task.result()[0] if task.done() and not task.cancelled() and task.exception() is None else None


class NodeTemplates:
    """The worker templates kept on Ray nodes (see the module docstring). Used on one event loop."""

    def __init__(self) -> None:
        #: The Ray address the templates are on (None: none kept).
        self.address: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Ray's connection as the relays were started, and the one kept for the templates after
        #: their cluster stopped (ended with them).
        self._ray: RaySession | None = None
        self._kept_session: RaySession | None = None
        self._token = secrets.token_hex(node_relay.TOKEN_CHARS // 2)
        self._nodes: dict[str, _KeptNode] = {}
        #: Relays whose node's template ended and was started again elsewhere (ended at close).
        self._retired: list[_KeptNode] = []
        self._pools: dict[tuple[str, tuple[str, ...], str], RemoteTemplates] = {}
        #: Numbers the relays, so that a node's next relay never meets its ended templates.
        self._generations = itertools.count()
        #: Nodes whose ended template was started again during this cluster start (:meth:`use`).
        self._retried: set[tuple[str, int]] = set()

    async def use(self, address: str, session: RaySession) -> None:
        """Before a cluster connects to Ray at ``address``: templates kept for another Ray cluster,
        on another event loop, or over a connection that was lost end now."""
        loop = asyncio.get_running_loop()
        stale = self._loop is not None and self._loop is not loop
        if self.address is not None and (stale or self.address != address
                                         or (self._nodes and not session.connected())):
            log.info("ending the worker templates kept on Ray at %s", self.address)
            await self.close()
        self.address, self._loop = address, loop
        self._retried.clear()

    def template(self, session: RaySession, node_id: str, node_ip: str, env: Mapping[str, str], *,
                 python: str | None, require: Sequence[str], cwd: str) -> RemoteTemplate:
        """The template for workers with ``env`` on the node ``node_id`` (started now, in the
        background, if none can serve)."""
        self._ray = session
        key = (python or "", tuple(require), cwd)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = RemoteTemplates(python or "", require, cwd)
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = _KeptNode(node_ip, next(self._generations), asyncio.ensure_future(
                self._start_relay(session, node_id, node_ip, python)))
        template = pool.get((node_id, node.generation, node.attempt), node_ip, env, self._starter(session, node))
        if template.problem and (node_id, node.generation) not in self._retried:  # once per cluster start
            log.info("the worker template on Ray node %s ended (%s); starting another", node_ip, template.problem)
            self._retried.add((node_id, node.generation))
            node.attempt += 1
            template = pool.get((node_id, node.generation, node.attempt), node_ip, env, self._starter(session, node))
        return template

    @property
    def token(self) -> str:
        """The token the kept relays were made with (an agent's connection starts with it)."""
        return self._token

    def relay(self, session: RaySession, node_id: str, node_ip: str,
              python: str | None) -> asyncio.Future[tuple[Any, dict[str, Any]]]:
        """The node's kept relay, ``(actor, where)`` once started (started now if there is none):
        a CPU worker's own agent starts through it too (``launcher.py``)."""
        self._ray = session
        node = self._nodes.get(node_id)
        if node is None or (node.start.done() and node.actor() is None):  # none, or its start failed
            if node is not None:
                self._retired.append(node)
            node = self._nodes[node_id] = _KeptNode(
                node_ip, next(self._generations),
                asyncio.ensure_future(self._start_relay(session, node_id, node_ip, python)))
        return asyncio.shield(node.start)

    def forget(self, node_id: str) -> None:
        """The node's relay is gone (its node lost, or the actor killed): a later call starts another."""
        node = self._nodes.pop(node_id, None)
        if node is not None:
            self._retired.append(node)

    def _starter(self, session: RaySession, node: _KeptNode) -> Callable[[], Awaitable[RelayAgent]]:
        async def start_agent() -> RelayAgent:
            actor, where = await asyncio.shield(node.start)
            return await RelayAgent.start(where, self._token, actor, node.node_ip, session.wrap, None,
                                          session.connected)

        return start_agent

    async def _start_relay(self, session: RaySession, node_id: str, node_ip: str,
                           python: str | None) -> tuple[Any, dict[str, Any]]:
        ray = session.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray.cloudpickle.register_pickle_by_value(node_relay)  # the nodes need no mwnotebook
        actor = ray.remote(node_relay.NodeRelay).options(
            num_cpus=0, max_concurrency=32, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        ).remote(node_ip, self._token, BOOTSTRAP, python)
        try:
            where = await session.get(actor.where.remote(), RELAY_START_SECONDS)
        except Exception as exc:
            with contextlib.suppress(Exception):
                ray.kill(actor)
            raise ClusterStartError(f"the template relay on Ray node {node_ip} did not start: "
                                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        log.debug("kept relay on Ray node %s answered", node_ip)
        return actor, dict(where)

    @property
    def kept(self) -> bool:
        """Some template is kept (starting or serving)."""
        return any(not t.problem for t in self.templates())

    def keep(self, session: RaySession) -> bool:
        """At a cluster's stop: True when templates are kept, and Ray's connection with them: the
        cluster must then not end ``session`` (when it owns the connection, it is ended with the
        templates, :meth:`close`)."""
        if not self.kept or not session.connected():
            return False
        if session.owns_connection:
            self._kept_session = session
        return True

    def templates(self) -> list[RemoteTemplate]:
        return [t for p in self._pools.values() for t in p.templates()]

    async def close(self) -> None:
        """End the templates and their relays, then Ray's connection if it was kept for them."""
        pools, self._pools = list(self._pools.values()), {}
        nodes, self._nodes, self._retired = [*self._nodes.values(), *self._retired], {}, []
        ray, self._ray = self._kept_session or self._ray, None
        kept, self._kept_session = self._kept_session, None
        self.address = None
        await asyncio.gather(*(p.close() for p in pools), return_exceptions=True)
        for node in nodes:
            actor = node.actor()
            if actor is None:
                node.start.cancel()
            elif ray is not None and ray.connected():
                with contextlib.suppress(Exception):
                    await ray.get(actor.stop.remote(), STOP_SECONDS)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.to_thread(ray.ray.kill, actor), STOP_SECONDS)
        if kept is not None:
            await kept.close()


_TEMPLATES = ProcessWide(NodeTemplates)


def notebook_templates() -> NodeTemplates:
    """The templates kept for this notebook's process (one instance, as its background loop)."""
    return _TEMPLATES.get()
