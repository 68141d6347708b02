"""Worker kernels on remote hosts over SSH (asyncssh). Connections follow the user's SSH config
as OpenSSH reads it (``ssh -G``; see ``ssh_connect.py``). No protocol code of our own.

Per host, the launcher holds one SSH link (``host_link.py``: its connections, another each time
sshd's MaxSessions, 10 by default, refuses a new session; a restart's reconnect window). Every
remote process is the small agent of ``processes/shipped/remote_agent.py``, started as
``exec PYTHON -u -c BOOTSTRAP``; its source, then its configuration (the signing key, TF_CONFIG
and the rest of the worker environment) travel on the channel's stdin, never on a command line.

* Which host runs which task: worker ``i`` on the ``i``-th ``--hosts`` slot; with the spec's
  ``TaskPlacement`` (config/task_placement.py: a ``--ps`` cluster's coordinator, servers and the
  evaluator, ``--place``) every task on its placed host, launch slot by launch slot (launchers/base.py).
* ``tf_addresses`` runs one agent per host in its ``ports`` role: it checks the interpreter and
  the required modules, then holds one TCP port per training task on that host for TensorFlow's gRPC
  server, until the next ``tf_addresses`` or :meth:`SSHLauncher.close` (``SO_REUSEPORT``: a lost
  worker server started again binds its port again). The cluster list uses the address each host
  was reached at (the server side of ``SSH_CONNECTION``) or the ``tf_address`` override. Meanwhile
  one spare agent per task is started, so that its interpreter has loaded by the time ``start`` configures it.
* ``start`` configures an agent in its ``kernel`` role. The kernel binds 127.0.0.1 on its host;
  each of its five ZMQ ports is reached through an SSH local port forward on the notebook's
  loopback, and ``connection_info`` names those forwarded ports.
* Templates (default; ``--no-template`` or ``MWNOTEBOOK_TEMPLATE=0`` turn them off): one more agent
  per host runs in its ``template`` role (``remote_templates.py``), started with the port holder and
  kept until :meth:`SSHLauncher.close`; ``start`` names its socket in the kernel agent's
  configuration, and the kernel is forked from it instead of started (a fresh start, with a
  one-line notice, where the template can't serve).
* interrupt / kill are lines sent to the agent; the agent reports the kernel's exit. Closing the
  channel (stop, or a lost connection) makes the agent kill the kernel's process group.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import asyncssh

from mwnotebook.config.hosts import HostsArg, HostSpec, parse_host, parse_tf_address, worker_hosts
from mwnotebook.config.task_placement import TaskPlacement, launch_slots
from mwnotebook.config.worker_env import startup_env as spec_startup_env
from mwnotebook.errors import ClusterStartError, ConfigError
from mwnotebook.launchers.local.template_pool import templates_disabled
from mwnotebook.launchers.remote.agent_channel import DEFAULT_REQUIRE
from mwnotebook.launchers.remote.agent_events import AgentEvent, gather_port_holders
from mwnotebook.launchers.remote.book import RemoteBook
from mwnotebook.launchers.remote.kernel_handle import Listener, RemoteKernelHandle
from mwnotebook.launchers.remote.kernel_start import KEEPALIVE_COUNT_MAX, KEEPALIVE_INTERVAL, first_event, start_kernel
from mwnotebook.launchers.remote.template_pool import RemoteTemplate, RemoteTemplates
from mwnotebook.launchers.ssh.agent import SSHAgent
from mwnotebook.launchers.ssh.host_link import HostLink, LinkSettings

if TYPE_CHECKING:
    from mwnotebook.config.spec import ClusterSpec

__all__ = ["DEFAULT_REQUIRE", "KEEPALIVE_COUNT_MAX", "KEEPALIVE_INTERVAL", "SSHLauncher"]

log = logging.getLogger(__name__)

#: How long a restart waits for a host that was reachable before to answer again. Bounded: a
#: stop (or the notebook's exit) waits for a restart under way.
RECONNECT_WINDOW = 30.0

HostKey = tuple[str, str | None, int | None]


class SSHLauncher:
    """Starts worker kernels on SSH hosts. Worker ``i`` runs on ``worker_hosts(hosts)[i]``; with
    ``tasks`` (the cluster's task placement), launch slot ``i``'s task runs on its placed host."""

    def __init__(
        self,
        hosts: HostsArg,
        *,
        workers: int | None = None,
        workers_per_host: int | None = None,
        python: str | None = None,
        tf_address: str | None = None,
        require: Sequence[str] = DEFAULT_REQUIRE,
        connect_timeout: float = 10.0,
        startup_timeout: float = 60.0,
        cwd: str | None = None,
        ssh_options: Mapping[str, Any] | None = None,
        ssh_config: str | None = None,
        keepalive_interval: float = KEEPALIVE_INTERVAL,
        keepalive_count_max: int = KEEPALIVE_COUNT_MAX,
        template: bool = True,
        startup_env: Mapping[str, str] | None = None,
        tasks: TaskPlacement | None = None,
    ) -> None:
        self.placement = worker_hosts(hosts, workers, workers_per_host)
        #: Each task's host (None: worker slot i is launch slot i and address i, as for MWMS).
        self.tasks = tasks
        self._host_specs = {spec.target: spec for spec in self.placement}
        for name in tasks.distinct_hosts() if tasks is not None else ():
            if name not in self._host_specs:  # a --place host that is not in --hosts
                self._host_specs[name] = replace(parse_host(name), slots=1)
        # Default: the notebook's own interpreter path, as for local workers. It is right where
        # hosts share the environment at the same path (a shared home, the same image); elsewhere
        # the start-up error says to pass --python.
        self.python = python or sys.executable
        self.require = tuple(require)
        self.connect_timeout = connect_timeout
        self.startup_timeout = startup_timeout
        self.cwd = cwd
        #: ``--tf-address``: the address a host's tasks are reached at, keyed by every host that runs a
        #: task (a --place host too); a host not in it: the address it was reached at.
        self.tf_override = parse_tf_address(tf_address, list(self._host_specs.values()))
        #: How every connection is made (``ssh -F FILE``: default $MWNOTEBOOK_SSH_CONFIG, else
        #: OpenSSH's own choice; the keepalive).
        self.link_settings = LinkSettings(connect_timeout, keepalive_interval, keepalive_count_max,
                                          ssh_config, dict(ssh_options or {}))
        #: Per host: its SSH link (connections, MaxSessions fall-over, reconnect window).
        self.links: dict[HostKey, HostLink] = {}
        #: The port holders and kernels (launchers/remote/book.py); the spare agents started ahead.
        self._book = RemoteBook()
        self._spares: dict[int, tuple[asyncssh.SSHClientConnection, SSHAgent]] = {}
        #: Fork workers from a template per host (``remote_templates.py``); ``startup_env`` (the
        #: environment all workers share) lets tf_addresses start them before the workers' turn.
        self.use_template = template and not templates_disabled()
        self._startup_env = dict(startup_env) if startup_env is not None else None
        self._templates = RemoteTemplates(self.python, self.require, cwd)

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> SSHLauncher:
        """Build from a ``ClusterSpec`` (its placement, ``python``, ``tf_address``, start-up timeout
        and template choice). The SSH config file is OpenSSH's own, or $MWNOTEBOOK_SSH_CONFIG."""
        placement = spec.placement
        return cls(
            [replace(h, slots=1) for h in placement] if placement else spec.hosts,  # parsed once, by the spec
            workers=spec.workers,
            workers_per_host=None if placement else spec.workers_per_host,
            python=spec.python,
            tf_address=spec.tf_address,
            startup_timeout=spec.startup_timeout,
            template=spec.template,
            startup_env=spec_startup_env(spec),
            tasks=spec.task_placement,
        )

    # -- connections ---------------------------------------------------------------------------

    def _link(self, spec: HostSpec) -> HostLink:
        """``spec``'s host's link; a host reached before gets RECONNECT_WINDOW s to come back (a
        restart after its network failed)."""
        link = self.links.get(spec.key)
        if link is None:
            link = self.links[spec.key] = HostLink(spec, self.link_settings, reconnect_window=RECONNECT_WINDOW)
        return link

    async def _run_agent(self, spec: HostSpec) -> tuple[asyncssh.SSHClientConnection, SSHAgent]:
        """Start the agent on ``spec``'s host, on a new connection if the current one is full."""
        return await self._link(spec).session(lambda conn: SSHAgent.start(conn, spec.target, self.python))

    # -- TensorFlow addresses ------------------------------------------------------------------

    def address_hosts(self, count: int) -> list[HostSpec]:
        """The host of each of ``count`` training tasks, in address order."""
        if self.tasks is None:
            if count != len(self.placement):
                raise ConfigError(f"{count} workers requested but the hosts have "
                                  f"{len(self.placement)} worker slots")
            return list(self.placement)
        hosts = self.tasks.address_hosts()
        if count != len(hosts):
            raise ConfigError(f"{count} TensorFlow tasks requested but the placement has {len(hosts)}")
        return [self._host_specs[name] for name in hosts]

    def slot_host(self, slot: int) -> HostSpec:
        """The host of launch slot ``slot`` (ConfigError for a slot that has none)."""
        if self.tasks is None:
            if not 0 <= slot < len(self.placement):
                raise ConfigError(f"worker {slot} has no host (hosts give {len(self.placement)} slots)")
            return self.placement[slot]
        return self._host_specs[self.tasks.host_of_slot(slot)]

    def _slots_on(self, key: HostKey) -> list[int]:
        """The launch slots whose tasks run on ``key``'s host (each gets a spare agent)."""
        if self.tasks is None:
            return [i for i, spec in enumerate(self.placement) if spec.key == key]
        return [slot for task, slot in launch_slots(self.tasks.layout).items()
                if self._host_specs[self.tasks.host_of(task)].key == key]

    async def tf_addresses(self, count: int) -> list[str]:
        """Reserve one gRPC port per training task on its own host; ``host:port`` per task."""
        address_hosts = self.address_hosts(count)
        await self._release_ports()
        by_host: dict[HostKey, tuple[HostSpec, list[int]]] = {}
        for index, spec in enumerate(address_hosts):
            by_host.setdefault(spec.key, (spec, []))[1].append(index)
        if self.tasks is not None:  # a host that runs no training task (an evaluator's): preflight only
            for name in self.tasks.distinct_hosts():
                spec = self._host_specs[name]
                by_host.setdefault(spec.key, (spec, []))
        addresses: list[str] = [""] * count

        async def reserve(spec: HostSpec, indices: list[int]) -> None:
            _, agent = await self._run_agent(spec)

            async def answer() -> AgentEvent:
                # While the host answers, start the kernels' agents: their interpreters load in
                # parallel, and start() only has to hand each its configuration.
                spares = asyncio.ensure_future(self._start_spares(spec, self._slots_on(spec.key)))
                if self._startup_env is not None:
                    self._template(spec, self._startup_env)  # imports TensorFlow while the rest starts
                try:
                    return await self._first_event(agent, spec, self.connect_timeout + 10)
                finally:
                    await spares

            await self._book.reserve_ports(agent, indices, self.require, answer,
                                           lambda event: self.tf_override.get(spec.target) or str(event["address"]),
                                           addresses)

        await gather_port_holders((reserve(spec, ix) for spec, ix in by_host.values()), self._release_ports)
        log.info("TensorFlow addresses: %s", addresses)
        return addresses

    async def _start_spares(self, spec: HostSpec, slots: list[int]) -> None:
        for slot in slots:
            try:
                self._spares[slot] = await self._run_agent(spec)
            except Exception:  # start() will try again and report the problem
                log.debug("no spare agent for launch slot %d", slot, exc_info=True)
                return

    async def _release_ports(self) -> None:
        spares, self._spares = list(self._spares.values()), {}
        await self._book.release_ports(also=[agent for _, agent in spares])

    async def _first_event(self, agent: SSHAgent, spec: HostSpec, timeout: float) -> AgentEvent:
        """The agent's first event, raising ClusterStartError (naming the host) for failures."""
        return await first_event(agent, spec.target, timeout, self.python)

    # -- kernels -------------------------------------------------------------------------------

    async def start(self, index: int, env: Mapping[str, str]) -> RemoteKernelHandle:
        """Start launch slot ``index``'s kernel on its host (a restart: the same slot and ``env``)."""
        spec = self.slot_host(index)
        try:
            return await self._start(index, spec, env)
        except ClusterStartError as exc:
            exc.worker = index
            raise

    async def _start(self, index: int, spec: HostSpec, env: Mapping[str, str]) -> RemoteKernelHandle:
        key = str(uuid.uuid4())
        spare = self._spares.pop(index, None)
        if spare is not None and spare[1].usable and not spare[0].is_closed():
            conn, agent = spare
        else:
            if spare is not None:
                await spare[1].close()
            conn, agent = await self._run_agent(spec)
        link = self._link(spec)

        async def forward(port: int) -> tuple[str, int, Listener | None]:
            # the kernel binds 127.0.0.1 on its host: reached through a local forward on ours
            return await link.forward("127.0.0.1", port, via=conn)

        try:
            started = await start_kernel(
                agent, where=spec.target, key=key, env=env, require=self.require, cwd=self.cwd,
                timeout=self.startup_timeout, template=self._template(spec, env),
                wait=lambda seconds: self._first_event(agent, spec, seconds), forward=forward)
        except (asyncssh.Error, OSError) as exc:
            raise ClusterStartError(f"{spec.target}: the SSH connection failed while the kernel "
                                    f"started ({exc})", host=spec.target) from exc

        def describe_loss() -> str:
            reason = link.lost(conn)
            return f"lost the SSH connection to {spec.target}" + (f": {reason}" if reason else "")

        handle = self._book.keep(RemoteKernelHandle(index, spec.target, agent, started.pid, started.listeners,
                                                    started.info, remote_dir=started.remote_dir,
                                                    describe_loss=describe_loss))
        log.info("worker %d: kernel pid %s on %s", index, handle.pid, spec.target)
        return handle

    def _template(self, spec: HostSpec, env: Mapping[str, str]) -> RemoteTemplate | None:
        """The worker template for ``env`` on ``spec``'s host (started now if new); None when off."""
        if not self.use_template:
            return None

        async def start_agent() -> SSHAgent:
            return (await self._run_agent(spec))[1]

        return self._templates.get(spec.key, spec.target, env, start_agent)

    @property
    def templates(self) -> list[RemoteTemplate]:
        """The worker templates of this launcher (one per host and start-up environment)."""
        return self._templates.templates()

    async def close(self) -> None:
        """Kill every kernel this launcher started, release the ports, end the templates, close the
        connections."""
        await self._book.kill_kernels()
        await self._release_ports()
        await self._templates.close()
        links, self.links = list(self.links.values()), {}
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)
