"""A real Ray cluster on this machine for tests/ray: a head and two worker nodes, each on its own
loopback address, started with ``ray start`` by the tests themselves (one per test session).

Measured trap: on a loaded 2-core machine ``ray start`` can fail with "The current node
timed out during startup". The raylet waits a fixed 15 s for its dashboard agent's port files
(``WaitForDashboardAgentPorts`` in raylet.out) and aborts when the agent, a Python process importing
much of Ray, has not written them by then; the CLI's message hides the raylet's own one. Measured
here with the suite of other sessions running (load 10-12): the agent needed 22 s to its first log
line even at ``nice -n -20``, and all of three attempts failed. A port the raylet is given on its
command line is not waited for; ``ray start`` gives it the metrics ports (fixed here) but not the
agent's HTTP listen port. So while a node starts, :class:`_ListenPortFile` writes that one file
(``dashboard_agent_listen_port_<node id>``, our fixed port) as soon as the raylet's command line
names its node id, as the agent itself writes it once it has bound the port. Each node also gets
fixed ports (two nodes of one machine must not race for the same agent or metrics port), starts at
a raised CPU priority (``nice -n -10`` as root; kernels the actors start go back to nice 0:
``mwnotebook/launchers/ray/node_relay.py``), and a node that still fails is retried a bounded number
of times with the raylet's fatal line in the report.

The head gets ``--num-cpus=0``, so that every worker bundle lands on a worker node.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from testbed.processes import end_processes, tree

RAY = str(Path(sys.executable).with_name("ray")) if Path(sys.executable).with_name("ray").exists() else "ray"
#: Each node's fixed ports: base + 100 * node + offset (node 0 the head), the base the first of
#: these whose ports are all free (a cluster another test run left keeps its own).
BASE_PORTS = range(46300, 56300, 1000)
START_ATTEMPTS = 3
START_TIMEOUT = 180.0
#: Object store per node: small, the tests put nothing there (Ray's minimum is 75 MiB).
OBJECT_STORE_BYTES = 80 * 1024 * 1024
#: The head's dashboard port (``create(dashboard=True)``), as an offset from the cluster's base port.
DASHBOARD_OFFSET = 8
#: Seconds :meth:`RayTestCluster.wait_settled` waits for the GCS to give up a killed node.
SETTLE_TIMEOUT = 90.0


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_base(nodes: int) -> int:
    for base in BASE_PORTS:
        if all(_free(base + 100 * n + k) for n in range(nodes) for k in range(DASHBOARD_OFFSET + 1)):
            return base
    raise RuntimeError(f"no free port range for the Ray test nodes in {BASE_PORTS}")


@dataclass
class RayNode:
    ip: str
    index: int
    cpus: int
    base_port: int
    raylet_pid: int = 0

    def ports(self) -> list[str]:
        base = self.base_port + 100 * self.index
        return [f"--node-manager-port={base + 1}", f"--object-manager-port={base + 2}",
                f"--dashboard-agent-listen-port={base + 3}", f"--dashboard-agent-grpc-port={base + 4}",
                f"--runtime-env-agent-port={base + 5}", f"--metrics-export-port={base + 6}",
                f"--min-worker-port={base + 10}", f"--max-worker-port={base + 99}"]


@dataclass
class RayTestCluster:
    temp_dir: Path
    head: RayNode
    workers: list[RayNode]
    address: str = ""
    #: The head's Ray Client server (``ray://HEAD:PORT``).
    client_address: str = ""
    log: list[str] = field(default_factory=list)
    #: The ``ray`` command that starts the nodes (another Python's for a version-mismatch cluster).
    ray_bin: str = RAY
    #: The head's dashboard (``http://HOST:PORT``, what ``ray job submit --address`` takes) when it runs one.
    dashboard_address: str = ""

    def env(self) -> dict[str, str]:
        return {"RAY_USAGE_STATS_ENABLED": "0"}

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster (the raylets, GCS, agents, Ray workers and their children),
        the head's Ray Client server too: its command line names the GCS address, not the temp
        directory. (Left running, its per-client server kept Ray's fixed port 23000, and the next
        cluster's first ``ray://`` client failed: "SpecificServer startup failed".)"""
        found: dict[int, psutil.Process] = {}
        gcs = f"--address={self.address}" if self.address else None
        for proc in psutil.process_iter(["cmdline"]):
            cmd = " ".join(proc.info["cmdline"] or [])
            if str(self.temp_dir) in cmd or (gcs is not None and gcs in cmd.split()):
                found[proc.pid] = proc
                try:
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
                except psutil.NoSuchProcess:
                    pass
        return list(found.values())

    def rss_mib(self) -> float:
        """Resident memory of the cluster's own processes (kernels the actors start excluded)."""
        total = 0
        for proc in self.processes():
            try:
                cmd = " ".join(proc.cmdline())
                if "ipykernel" in cmd or "worker_kernel" in cmd or "mwnotebook-remote-agent" in cmd:
                    continue
                total += proc.memory_full_info().pss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total / 2**20

    def actor_pids(self) -> set[int]:
        """Ray worker processes that run an actor of ours (their process title names the class)."""
        pids = set()
        for proc in self.processes():
            try:
                if "NodeRelay" in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                    pids.add(proc.pid)
            except psutil.NoSuchProcess:
                continue
        return pids

    def placement_group_states(self) -> list[str]:
        """The states of the cluster's placement groups, asked by a driver of its own."""
        code = (f"import json, ray; ray.init(address={self.address!r}, log_to_driver=False);"
                "from ray.util import placement_group_table;"
                "print(json.dumps([g['state'] for g in placement_group_table().values()]))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"the placement group table could not be read: {done.stderr[-2000:]}")
        return list(json.loads(done.stdout.strip().splitlines()[-1]))

    def log_tail(self, pattern: str, chars: int = 3000) -> str:
        """The end of the newest session's log files matching ``pattern`` (for a failure's message)."""
        parts = []
        for path in sorted(self.temp_dir.glob(f"session_*/logs/{pattern}")):
            text = path.read_text(errors="replace").strip()
            if text:
                parts.append(f"--- {path.name}:\n{text[-chars:]}")
        return "\n".join(parts) or f"(no {pattern} under {self.temp_dir})"

    def kill_node(self, node: RayNode) -> None:
        """A node's machine dies: SIGKILL to its raylet and everything it started."""
        end_processes(tree(node.raylet_pid), grace=0, wait=0)

    def node_alive(self, node: RayNode) -> bool:
        try:
            return psutil.Process(node.raylet_pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def start_worker(self, node: RayNode) -> None:
        _start_node(self, node, ["--address", self.address])

    def wait_settled(self, timeout: float = SETTLE_TIMEOUT) -> str:
        """Wait until the GCS sees each worker node once, alive with its CPUs: after a node is killed
        and started again, the GCS keeps the killed node alive until its health checks fail (measured
        ~15-20 s). A placement group made before then can put both bundles on the other node (a
        fresh-clone CI run: 'ValueError: 127.0.0.3 is not in list'). Returns what the GCS last saw."""
        want = {node.ip: node.cpus for node in self.workers}
        code = (
            "import json, sys, time, ray\n"
            f"ray.init(address={self.address!r}, log_to_driver=False)\n"
            f"want = {want!r}\n"
            f"deadline = time.monotonic() + {timeout}\n"
            "while True:\n"
            "    alive = [(n['NodeManagerAddress'], n['Resources'].get('CPU', 0)) for n in ray.nodes() if n['Alive']]\n"
            "    seen = {ip: [cpus for a, cpus in alive if a == ip] for ip in want}\n"
            "    if all(seen[ip] == [want[ip]] for ip in want) or time.monotonic() > deadline:\n"
            "        print(json.dumps(seen)); sys.exit(0 if all(seen[ip] == [want[ip]] for ip in want) else 1)\n"
            "    time.sleep(0.5)\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout + 60, env={**os.environ, **self.env()})
        seen = (done.stdout.strip().splitlines() or ["(nothing)"])[-1]
        if done.returncode != 0:
            raise RuntimeError(f"the Ray test cluster did not settle within {timeout:.0f} s: the GCS sees "
                               f"{seen} (alive worker nodes' CPUs by address), want one node each with {want}; "
                               + done.stderr[-1500:])
        return seen

    def destroy(self) -> None:
        end_processes(self.processes(), grace=10, wait=5)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def unavailable_reason() -> str | None:
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (pip install '.[ray]')"
    return None


def _raylet_fatal(temp_dir: Path) -> str:
    """The raylet's own fatal line of the newest session (what ``ray start`` does not say)."""
    lines = []
    for path in sorted(temp_dir.glob("session_*/logs/raylet*.out")):
        lines += [line for line in path.read_text(errors="replace").splitlines() if re.search(r"\] \(raylet\).* C |Check failed", line)]
    return lines[-1][:400] if lines else "(no fatal line in raylet.out)"


def _raylet_pid(temp_dir: Path, ip: str) -> int:
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if cmd and cmd[0].endswith("raylet") and f"--node_ip_address={ip}" in cmd and \
                any(str(temp_dir) in part for part in cmd):
            return proc.pid
    return 0


class _ListenPortFile:
    """While one node starts: write its dashboard agent's listen-port file for the raylet (see the
    module docstring) once a raylet of this cluster with that node's address shows its node id."""

    def __init__(self, cluster: RayTestCluster, node: RayNode) -> None:
        self.cluster, self.node = cluster, node
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        port = str(self.node.base_port + 100 * self.node.index + 3)
        while not self.done.wait(0.1):
            for proc in psutil.process_iter(["cmdline"]):
                cmd = proc.info["cmdline"] or []
                if not cmd or not cmd[0].endswith("raylet"):
                    continue
                args = dict(a[2:].split("=", 1) for a in cmd[1:] if a.startswith("--") and "=" in a)
                if str(self.cluster.temp_dir) not in args.get("session_dir", ""):
                    continue
                # the head starts alone (Ray renames its 127.0.0.1); a worker node by its address
                if self.node.index and args.get("node_ip_address") != self.node.ip:
                    continue
                path = Path(args["session_dir"]) / f"dashboard_agent_listen_port_{args.get('node_id', '')}"
                if "node_id" in args and not path.exists():
                    tmp = path.with_suffix(".tmp")
                    tmp.write_text(port)
                    tmp.replace(path)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def _start_node(cluster: RayTestCluster, node: RayNode, role: list[str]) -> None:
    env = {**os.environ, **cluster.env()}
    # a raised priority needs root; without it the nodes start at the normal one
    nice = ["nice", "-n", "-10"] if os.geteuid() == 0 else []
    argv = [*nice, cluster.ray_bin, "start", *role, f"--node-ip-address={node.ip}", f"--num-cpus={node.cpus}",
            "--num-gpus=0", "--disable-usage-stats", f"--object-store-memory={OBJECT_STORE_BYTES}",
            *node.ports()]
    for attempt in range(1, START_ATTEMPTS + 1):
        started = time.monotonic()
        writer = _ListenPortFile(cluster, node)
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=START_TIMEOUT)
        finally:
            writer.stop()
        took = time.monotonic() - started
        if proc.returncode == 0:
            node.raylet_pid = _raylet_pid(cluster.temp_dir, node.ip)
            cluster.log.append(f"{node.ip}: started in {took:.1f} s (attempt {attempt})")
            return
        fatal = _raylet_fatal(cluster.temp_dir)
        if fatal.startswith("(no fatal"):
            fatal = (proc.stderr or proc.stdout).strip()[-600:]
        cluster.log.append(f"{node.ip}: attempt {attempt} failed after {took:.1f} s: {fatal}")
        # what this attempt left (a GCS without its raylet, agents) goes before the next one
        for proc_ in psutil.process_iter(["cmdline"]):
            cmd = " ".join(proc_.info["cmdline"] or [])
            if (node.index == 0 and str(cluster.temp_dir) in cmd) or f"node_ip_address={node.ip}" in cmd \
                    or f"node-ip-address={node.ip}" in cmd:
                try:
                    proc_.kill()
                except psutil.NoSuchProcess:
                    pass
        time.sleep(1)
    raise RuntimeError(f"ray start on {node.ip} failed {START_ATTEMPTS} times: " + "; ".join(cluster.log))


def create(worker_cpus: tuple[int, ...] = (2, 2), *, ray_bin: str = RAY, dashboard: bool = False) -> RayTestCluster:
    """A head on 127.0.0.1 (Ray names it by this machine's address) and one worker node per entry
    of ``worker_cpus`` on 127.0.0.2, 127.0.0.3, ..., started one after the other, each with
    ``ray_bin`` (this interpreter's ``ray`` by default). ``dashboard``: the head runs Ray's dashboard
    (its job server: ``ray job submit``), which needs ``ray[default]`` where ``ray_bin`` runs."""
    temp_dir = Path(tempfile.mkdtemp(prefix="mwray-", dir="/tmp"))
    base = free_base(len(worker_cpus) + 1)
    head = RayNode("127.0.0.1", 0, 0, base)
    workers = [RayNode(f"127.0.0.{i + 2}", i + 1, cpus, base) for i, cpus in enumerate(worker_cpus)]
    cluster = RayTestCluster(temp_dir, head, workers, ray_bin=ray_bin)
    try:
        board = (["--include-dashboard=true", "--dashboard-host=127.0.0.1",
                  f"--dashboard-port={base + DASHBOARD_OFFSET}"] if dashboard else ["--include-dashboard=false"])
        _start_node(cluster, head, ["--head", f"--port={base}", *board,
                                    f"--temp-dir={temp_dir}", f"--ray-client-server-port={base + 7}"])
        if dashboard:
            cluster.dashboard_address = f"http://127.0.0.1:{base + DASHBOARD_OFFSET}"
        from ray._private.services import get_node_ip_address

        head.ip = get_node_ip_address()  # Ray replaces 127.0.0.1 by the machine's own address
        head.raylet_pid = _raylet_pid(temp_dir, head.ip)
        cluster.address = f"{head.ip}:{base}"
        cluster.client_address = f"ray://{head.ip}:{base + 7}"
        for node in workers:
            cluster.start_worker(node)
    except BaseException:
        cluster.destroy()
        raise
    return cluster
