"""The notebook's connection to a Ray cluster and the workers' placement group, each step bounded
and each failure a sentence naming what to do: Ray not installed, an
address nobody answers at, mismatched Ray or Python versions, a placement group that cannot or
does not become ready. Ray's calls block, so they run in threads (:func:`asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from mwnotebook.errors import ClusterStartError, ConfigError

__all__ = ["Placement", "RaySession", "import_ray"]

log = logging.getLogger(__name__)

#: How long the head's port may take to accept a TCP connection before the address counts as unreachable.
REACH_SECONDS = 5.0
#: How often a waiting placement group is looked at again (an abort is noticed this fast).
PLACEMENT_POLL_SECONDS = 0.5
#: Ray's setting for how long a driver waits for a lost head before it ends its own process, and
#: what it is here unless the user set it: a notebook kernel outlives a lost head (its workers end
#: anyway: the nodes' raylets end the relay actors, and the agents and kernels die with them).
RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
HEAD_LOSS_SECONDS = 10**9
#: A bound on Ray's own calls at cluster stop (a lost head would hold them forever).
STOP_CALL_SECONDS = 10.0


def import_ray() -> Any:
    """The ``ray`` module, or a :class:`ConfigError` saying how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ConfigError(f"--ray needs Ray in the notebook's environment ({exc}): "
                          "pip install 'mwnotebook[ray]', the same Ray version as the cluster's") from None


#: Ray's own variable for the cluster ``auto`` means (``ray.init`` reads it for ``auto``).
ADDRESS_ENV = "RAY_ADDRESS"


def resolve_address(address: str, environ: Mapping[str, str]) -> str:
    """The address ``ray.init`` will connect to: for ``auto``, ``RAY_ADDRESS`` when it is set
    (Ray's rule), else ``auto`` (Ray then looks for a cluster started on this machine)."""
    if address == "auto":
        return environ.get(ADDRESS_ENV, "").strip() or address
    return address


def describe(address: str, resolved: str) -> str:
    """How an error names the address: ``auto`` with what it resolved to."""
    return address if resolved == address else f"{address} ({ADDRESS_ENV}={resolved})"


def head_endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of the head for a ``HOST:PORT`` or ``ray://HOST:PORT`` address; None for auto."""
    if address == "auto":
        return None
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    if parts.hostname is None or parts.port is None:
        return None
    return parts.hostname, parts.port


def check_reachable(address: str, resolved: str | None = None) -> None:
    """A :class:`ClusterStartError` within :data:`REACH_SECONDS` when nothing listens at the head's
    address (``ray.init`` itself retries for a minute or more, and its thread outlives a timeout).
    ``resolved``: what ``auto`` stands for (:func:`resolve_address`)."""
    resolved = resolved or address
    endpoint = head_endpoint(resolved)
    if endpoint is None:
        return
    try:
        socket.create_connection(endpoint, timeout=REACH_SECONDS).close()
    except OSError as exc:
        raise ClusterStartError(f"--ray {describe(address, resolved)}: nothing answers at "
                                f"{endpoint[0]}:{endpoint[1]} ({exc}); "
                                "is the Ray head running (ray start --head) and is this its address "
                                "(the GCS port, 6379 by default, or ray://HOST:10001 for Ray Client)?") from None


def _gist(text: str) -> str:
    """The line of an error's text that says what happened: its first, or for a header with a
    traceback after it (Ray Client's "Initialization failure from server:") the header and the
    traceback's last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[-1]}"
    return lines[0]


#: Ray's text for a version mismatch (``ray/_private/utils.py`` ``check_version_info``): the
#: cluster's versions, then this process's: "... started with:\n    Ray: X\n    Python: Y\n".
_STARTED_WITH = re.compile(r"started with:\s*Ray:\s*(\S+)\s*Python:\s*(\S+)")


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def version_mismatch(address: str, text: str) -> ClusterStartError | None:
    """Ray's "Version mismatch" (raised by ``ray.init`` before anything is placed) as a sentence
    naming both sides' versions and what to do; None for any other text. A driver (``HOST:PORT``,
    ``auto``) must match the cluster's Python to the patch version (Ray's default), a Ray Client
    (``ray://``) to the minor version."""
    found = _STARTED_WITH.findall(text)
    if "version mismatch" not in text.lower() or len(found) < 2:
        return None
    (cluster_ray, cluster_python), (our_ray, our_python) = found[0], found[1]
    differ = []
    if cluster_ray != our_ray:
        differ.append(f"Ray {cluster_ray} on the cluster, Ray {our_ray} here")
    if cluster_python != our_python:
        differ.append(f"Python {cluster_python} on the cluster, Python {our_python} here")
    todo = (f"Run the notebook's kernel under Python {_minor(cluster_python)} (the cluster's {cluster_python}) "
            f"with pip install 'ray=={cluster_ray}' 'mwnotebook[ray]'")
    if _minor(cluster_python) == _minor(our_python) and cluster_python != our_python:
        todo += (f", or keep Python {our_python}: Ray wants the same patch version from a driver "
                 "(HOST:PORT, auto) unless RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor is set in the notebook's "
                 "environment; through Ray Client (ray://HEAD_HOST:10001) the minor version is enough")
    return ClusterStartError(f"--ray {address}: the notebook's Ray and Python must be the cluster's: "
                             f"{'; '.join(differ) or 'they differ'}. {todo}")


def init_error(address: str, exc: BaseException, resolved: str | None = None) -> ClusterStartError:
    """``ray.init``'s failure as a sentence a user can act on (``resolved``: what ``auto`` stood for)."""
    text = str(exc).strip()
    first = _gist(text) or type(exc).__name__
    if (resolved or address) == "auto" and "could not find any running ray instance" in text.lower():
        return ClusterStartError(f"--ray auto: no Ray cluster runs on this machine and {ADDRESS_ENV} is not "
                                 "set. Give the head's address (--ray HEAD_HOST:6379, or ray://HEAD_HOST:10001 "
                                 f"from outside the cluster), or set {ADDRESS_ENV} in the notebook's environment")
    target = resolved or address
    address = describe(address, target)
    mismatch = version_mismatch(address, text)
    if mismatch is not None:
        return mismatch
    if "version mismatch" in text.lower() or "python version" in text.lower() or "ray version" in text.lower():
        return ClusterStartError(f"--ray {address}: the notebook's Ray or Python version differs from the "
                                 f"cluster's: {first}. Install the cluster's Ray version (pip install "
                                 "'ray==X.Y.Z') in the notebook's environment, under the cluster's Python "
                                 "version")
    hint = ("; when the notebook is not on a node of the cluster, connect through Ray Client: "
            "--ray ray://HEAD_HOST:10001" if not target.startswith("ray://") else "")
    return ClusterStartError(f"--ray {address}: could not connect to the Ray cluster: {first}{hint}. "
                             "The head's own log says more: session_latest/logs/gcs_server.out and "
                             "raylet.out under the head's Ray temp directory (/tmp/ray by default)")


#: Ray Client's words when the head's per-client server died as it started. Measured on a fresh head
#: (tests/ray/test_ray_versions.py, its first client 3 times in 4): Ray's proxier starts that server
#: while its own gRPC threads run ("skipping fork() handlers"), the child aborts in gRPC's poller,
#: and the next one starts: one more connection is worth it. The proxier can also find that server
#: already dead when it looks at its process (psutil's "ZombieProcess": a fresh test head's first
#: client, tests/ray/test_ray_ssh.py).
CLIENT_SERVER_DIED = ("Starting Ray client server failed", "SpecificServer startup failed",
                      "psutil.ZombieProcess")


def client_server_died(text: str) -> bool:
    return any(words in text for words in CLIENT_SERVER_DIED)


def _not_the_sigterm_note(record: logging.LogRecord) -> bool:
    return "SIGTERM handler is not set" not in record.getMessage()


class RaySession:
    """``ray.init`` for this notebook, once; shut down at :meth:`close` only if it was ours (a
    notebook that connected to Ray itself keeps its connection)."""

    def __init__(self, address: str, environ: Mapping[str, str] | None = None) -> None:
        self.address = address
        #: What ``ray.init`` connects to (``auto``: ``RAY_ADDRESS`` when set), read once, here.
        self.resolved = resolve_address(address, os.environ if environ is None else environ)
        self.ray = import_ray()
        self._ours = False
        #: Where ``ray.init`` connects instead of the address, when set (:meth:`reach_at`).
        self.via: str | None = None
        self._link_lost: Callable[[], bool] = lambda: False

    def reach_at(self, address: str, lost: Callable[[], bool]) -> None:
        """Connect at ``address`` instead: a local SSH forward to a ``ray://`` address (``--ray-ssh``,
        ``launchers/ray/ssh_jump.py``); ``lost``: that forward's connection is gone. Errors still
        name the address the user gave."""
        self.via = address
        self._link_lost = lost

    async def connect(self, timeout: float) -> None:
        if self.ray.is_initialized():
            return
        if self.via is None:  # through SSH: the launcher asked the SSH host (ssh_jump.py)
            await asyncio.to_thread(check_reachable, self.address, self.resolved)
        started = time.monotonic()
        for attempt in (1, 2):
            try:
                left = max(started + timeout - time.monotonic(), 1.0)
                await asyncio.wait_for(asyncio.to_thread(self._init), left)
                break
            except asyncio.TimeoutError:
                raise ClusterStartError(f"--ray {self.address}: no connection to the Ray cluster within "
                                        f"{timeout:.0f} s; see the head's session_latest/logs/gcs_server.out") from None
            except ClusterStartError:
                raise
            except Exception as exc:
                if attempt == 1 and self.resolved.startswith("ray://") and client_server_died(str(exc)):
                    log.warning("--ray %s: the head's Ray Client server for this connection died as it "
                                "started (%s); connecting once more", self.address, _gist(str(exc)))
                    continue
                raise init_error(self.address, exc, self.resolved) from None
        log.info("connected to Ray at %s in %.1f s", self.address, time.monotonic() - started)

    def _init(self) -> None:
        """``ray.init`` off the main thread, on purpose: there Ray would replace the notebook
        kernel's SIGTERM handler with one that exits; its warning that it did not is dropped."""
        worker_log = logging.getLogger("ray._private.worker")
        worker_log.addFilter(_not_the_sigterm_note)
        # Ray ends a driver's whole process when the head stays unreachable for this long (60 s by
        # default): here that process is the user's notebook kernel. Read once, by ray.init.
        patient = RECONNECT_ENV not in os.environ
        if patient:
            os.environ[RECONNECT_ENV] = str(HEAD_LOSS_SECONDS)
        try:
            self.ray.init(address=self.via or self.address, log_to_driver=False, logging_level=logging.WARNING,
                          configure_logging=False)
        except BaseException:
            # A refused driver (a version mismatch) leaves Ray's module half connected: the
            # notebook's next ray.init would fail with a bare AssertionError.
            try:
                self.ray.shutdown()
            except Exception:
                log.debug("ray.shutdown after a failed ray.init failed", exc_info=True)
            raise
        finally:
            worker_log.removeFilter(_not_the_sigterm_note)
            if patient:
                os.environ.pop(RECONNECT_ENV, None)
        self._ours = True

    def connected(self) -> bool:
        """Ray is connected. Every call to Ray after a lost connection is checked with this first:
        Ray's auto-init would otherwise start a new, local Ray on the notebook's machine."""
        # Through a lost SSH forward, a Ray Client still says it is connected while it tries to
        # reconnect (30 s), and each call made meanwhile blocks its thread, the engine's loop too.
        return bool(self.ray.is_initialized()) and not self._link_lost()

    @property
    def owns_connection(self) -> bool:
        """This session's ``ray.init`` made Ray's connection (:meth:`close` ends it)."""
        return self._ours

    def wrap(self, ref: Any) -> asyncio.Future[Any]:
        """A Ray ObjectRef as a future of the running loop."""
        return asyncio.wrap_future(ref.future())

    async def get(self, ref: Any, timeout: float) -> Any:
        return await asyncio.wait_for(self.wrap(ref), timeout)

    async def close(self) -> None:
        # Also when Ray says it is not initialized: a Ray Client that lost its connection (through a
        # lost --ray-ssh forward) keeps its context, and the next ray.init would fail with "The
        # client has already connected to the cluster with allow_multiple=True".
        if self._ours:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.ray.shutdown), STOP_CALL_SECONDS)
            except asyncio.TimeoutError:
                log.warning("ray.shutdown did not return within %.0f s (is the head gone?)", STOP_CALL_SECONDS)
        self._ours = False


def _fmt(resources: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in sorted(resources.items()) if k in ("CPU", "GPU")) or "no CPUs"


class Placement:
    """One placement group of ``count`` bundles (CPUs, GPUs each), ready or removed."""

    def __init__(self, session: RaySession, count: int, cpus: int, gpus: int | None, strategy: str) -> None:
        self.session = session
        self.count = count
        self.bundle: dict[str, float] = {"CPU": float(cpus)}
        if gpus:
            self.bundle["GPU"] = float(gpus)
        self.strategy = strategy
        self.group: Any = None
        #: The address and the Ray node id of the node that holds each bundle, in bundle order.
        self.node_ips: list[str] = []
        self.node_ids: list[str] = []

    def _what(self) -> str:
        return f"{self.count} bundles of {_fmt(self.bundle)} ({self.strategy})"

    def _check_feasible(self) -> None:
        """Fail at once when the cluster as a whole could never hold the bundles."""
        ray = self.session.ray
        total = ray.cluster_resources()
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        for name, amount in self.bundle.items():
            if total.get(name, 0) < amount * self.count or not any(n.get(name, 0) >= amount for n in nodes):
                raise ClusterStartError(
                    f"the Ray cluster cannot hold {self._what()}: it has {_fmt(total)} in all "
                    f"({', '.join(_fmt(n) for n in nodes)} per node). Use fewer --workers or "
                    "--cpus-per-worker, or add nodes")
        if self.strategy == "STRICT_SPREAD":
            fit = sum(1 for n in nodes if all(n.get(k, 0) >= v for k, v in self.bundle.items()))
            if fit < self.count:
                raise ClusterStartError(f"--ray-strategy STRICT_SPREAD needs {self.count} nodes that each "
                                        f"hold a bundle of {_fmt(self.bundle)}; the cluster has {fit}")

    async def reserve(self, timeout: float, aborted: Callable[[], bool]) -> None:
        """Create the group and wait until it is ready: bounded by ``timeout``; removed on failure."""
        ray = self.session.ray
        from ray.util.placement_group import placement_group

        await asyncio.to_thread(self._check_feasible)
        self.group = await asyncio.to_thread(placement_group, [dict(self.bundle)] * self.count,
                                             strategy=self.strategy, name="")
        ready = self.session.wrap(self.group.ready())
        deadline = time.monotonic() + timeout
        try:
            while not ready.done():
                if aborted():
                    raise ClusterStartError("the start was interrupted while Ray placed the workers")
                if time.monotonic() > deadline:
                    free = await asyncio.to_thread(ray.available_resources)
                    raise ClusterStartError(
                        f"Ray did not place {self._what()} within {timeout:.0f} s: the cluster has "
                        f"{_fmt(free)} free now (other jobs hold the rest?). Free resources, use fewer "
                        "--workers or --cpus-per-worker, or raise --timeout")
                await asyncio.wait({ready}, timeout=PLACEMENT_POLL_SECONDS)
            ready.result()
            self.node_ids, self.node_ips = await asyncio.to_thread(self._nodes)
        except BaseException:
            ready.cancel()
            await self.remove()
            raise

    def _nodes(self) -> tuple[list[str], list[str]]:
        """The node id and address of each bundle's node."""
        from ray.util import placement_group_table

        ray = self.session.ray
        table = placement_group_table(self.group)
        by_id = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        ids = [table["bundles_to_node_id"][i] for i in range(self.count)]
        return ids, [by_id[i] for i in ids]

    def _placed_on_live_nodes(self) -> tuple[list[str], list[str]] | None:
        """The bundles' node ids and addresses once the group is placed again on live nodes; None before."""
        from ray.util import placement_group_table

        ray = self.session.ray
        table = placement_group_table(self.group)
        alive = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
        nodes = table.get("bundles_to_node_id", {})
        if table.get("state") != "CREATED" or any(nodes.get(i) not in alive for i in range(self.count)):
            return None
        ids = [nodes[i] for i in range(self.count)]
        return ids, [alive[i] for i in ids]

    async def replaced(self, timeout: float) -> list[str] | None:
        """After a node was lost: wait (bounded) until Ray has placed the group's bundles again on
        live nodes (it does so by itself where resources allow); their addresses, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            placed = await asyncio.to_thread(self._placed_on_live_nodes)
            if placed is not None:
                self.node_ids, self.node_ips = placed
                return self.node_ips
            await asyncio.sleep(PLACEMENT_POLL_SECONDS)
        return None

    def scheduling(self, index: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(placement_group=self.group, placement_group_bundle_index=index)

    async def remove(self) -> None:
        group, self.group = self.group, None
        if group is not None and self.session.connected():  # else the group ends with our Ray job
            from ray.util.placement_group import remove_placement_group

            try:
                await asyncio.wait_for(asyncio.to_thread(remove_placement_group, group), STOP_CALL_SECONDS)
            except Exception:  # the cluster is gone: so is the group
                log.debug("removing the placement group failed", exc_info=True)
