"""A throwaway Slurm cluster for tests: munged, one slurmctld and one slurmd per network-namespace
test host (``testbed/netns_hosts.py``), so every node has its own address on the test bridge.

Layout::

    root namespace (the notebook host, 10.213.N.1 on the bridge)
        munged   (own key, own socket in the temp dir: AuthInfo=socket=...; shared by all)
    netns mwnb-TAG-0  10.213.N.10   slurmd -N mwnode0  (sshd too, from netns_hosts)
    netns mwnb-TAG-1  10.213.N.11   slurmd -N mwnode1
    netns mwnb-TAG-2  10.213.N.12   the login node: slurmctld (SlurmctldHost=<this host>(10.213.N.12))
                                    and an sshd whose sessions get SLURM_CONF (alias ``mwhost2``)

The notebook reaches the nodes directly, as on a login node; :meth:`SlurmCluster.nodes_unreachable`
takes that away (blackhole routes in the root namespace to each node's address) so the notebook is a
laptop that reaches only the login node: Slurm itself (slurmctld, slurmd, srun on the login node)
does not notice, since none of its traffic leaves from the root namespace.

Clients (salloc, srun, sinfo, scancel, scontrol) find this cluster through ``SLURM_CONF``;
:meth:`SlurmCluster.env` gives the variables. Everything lives in one temporary directory; the
daemons run in the foreground as children of the test process, so teardown knows each one.
Needs root and Debian's ``slurm-wlm`` + ``munge``; :func:`unavailable_reason` says why not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from testbed import netns_hosts

BINARIES = ("munged", "slurmctld", "slurmd", "salloc", "srun", "sinfo", "scancel", "scontrol", "squeue")


def _binary(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None)


def unavailable_reason() -> str | None:
    """Why a test Slurm cluster cannot run here, or None if it can."""
    reason = netns_hosts.unavailable_reason()
    if reason:
        return reason.replace("remote tests", "Slurm tests")
    missing = [name for name in BINARIES if _binary(name) is None]
    if missing:
        return f"Slurm tests need {', '.join(missing)} (apt-get install slurm-wlm munge)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    """The daemons, the config and the test network. Use :func:`create` / :meth:`destroy`."""

    net: netns_hosts.TestNet
    root: Path
    node_names: list[str] = field(default_factory=list)
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def nodes(self) -> list[netns_hosts.TestHost]:
        """The namespace hosts running a slurmd (the last test host is the login node)."""
        return self.net.hosts[:len(self.node_names)]

    @property
    def login(self) -> netns_hosts.TestHost:
        return self.net.hosts[len(self.node_names)]

    @contextlib.contextmanager
    def nodes_unreachable(self) -> Iterator[None]:
        """While active, the root namespace (the notebook) cannot reach any node, only the login node."""
        added = []
        try:
            for host in self.nodes:
                subprocess.run(["ip", "route", "add", "blackhole", f"{host.address}/32"], check=True,
                               capture_output=True, timeout=10)
                added.append(host.address)
            yield
        finally:
            for address in added:
                subprocess.run(["ip", "route", "del", "blackhole", f"{address}/32"], capture_output=True,
                               timeout=10)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def env(self) -> dict[str, str]:
        """What a Slurm client needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30, check: bool = True, cwd: str | None = None,
            on_login: bool = False) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (``on_login``: from the login host's namespace,
        for when the root namespace cannot reach it)."""
        env = {**os.environ, **self.env()}
        env.pop("SLURM_JOB_ID", None)
        prefix = ["nsenter", f"--net=/run/netns/{self.login.netns}"] if on_login else []
        result = subprocess.run([*prefix, *argv], capture_output=True, text=True, env=env, timeout=timeout,
                                cwd=cwd)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def down(self, node: str) -> None:
        """Mark ``node`` down, what slurmctld does to a node it has lost."""
        self.run("scontrol", "update", f"nodename={node}", "state=down", "reason=mwnotebook-test")

    def resume(self, node: str, timeout: float = 30.0) -> None:
        """Back in service (the cluster's ReturnToService=2 often does it by itself); ``timeout`` is a
        generous hang bound: slurmctld answers within a second."""
        self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
        deadline = time.monotonic() + timeout
        while self.node_states().get(node, "").rstrip("*") not in ("idle", "mixed", "allocated"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm node {node} not back in service after {timeout:.0f} s: "
                                   f"{self.node_states()}")
            time.sleep(0.2)

    def jobs(self, on_login: bool = False) -> list[str]:
        """Ids of the jobs Slurm still knows as pending or running."""
        out = self.run("squeue", "-h", "-o", "%i %T", check=False, on_login=on_login).stdout
        return [line.split()[0] for line in out.splitlines()
                if line.split() and line.split()[1] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until every node is idle (no job left on it)."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            if states and set(states) == set(self.node_names) and all(
                    s.rstrip("*") == "idle" for s in states.values()):
                return
            self._check_daemons()
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm nodes not idle after {timeout:.0f} s: {states}; "
                                   f"logs in {self.root}")
            time.sleep(0.1)

    def _check_daemons(self) -> None:
        for name, proc in self.daemons.items():
            if proc.poll() is not None:
                log = (self.root / "log" / f"{name}.log")
                tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{tail}")

    def step_pids(self) -> dict[str, list[str]]:
        """Per node: processes in its namespace other than sshd and slurmd (job steps, kernels)."""
        keep = {self.net.hosts[i].sshd.pid for i in range(len(self.net.hosts))  # type: ignore[union-attr]
                if self.net.hosts[i].sshd is not None}
        keep |= {p.pid for n, p in self.daemons.items() if n.startswith("slurmd") or n == "slurmctld"}
        keep |= _children(self.daemons["slurmctld"].pid) if "slurmctld" in self.daemons else set()
        left = {}
        for host in self.net.hosts:
            pids = netns_hosts.ns_pids(host.netns) - keep
            if pids:
                left[host.netns] = netns_hosts.describe_pids(pids)
        return left

    def wait_no_leftovers(self, timeout: float = 15.0) -> dict[str, list[str]]:
        """Wait until no job is known and no node runs anything but its daemons."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.step_pids()
            jobs = self.jobs()
            if jobs:
                left["squeue"] = jobs
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def destroy(self) -> None:
        """Cancel every job, stop every daemon, remove the namespaces and the directory."""
        if self.daemons.get("slurmctld") is not None and self.daemons["slurmctld"].poll() is None:
            for job in self.jobs():
                self.run("scancel", job, check=False, timeout=10)
        order = [n for n in self.daemons if n.startswith("slurmd")] + ["slurmctld", "munged"]
        for name in order:
            proc = self.daemons.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.net.destroy()  # kills anything left in the node namespaces
        shutil.rmtree(self.root, ignore_errors=True)


def start_and_kill_a_notebook(cluster: SlurmCluster, options: str) -> None:
    """Start ``Cluster(OPTIONS)`` (2 workers) in another Python process, then SIGKILL that process: it
    can clean nothing up itself. Checks it started with one job first."""
    script = (
        "import time\n"
        "from mwnotebook import Cluster\n"
        f"c = Cluster({options})\n"
        "c.start()\n"
        "print(' '.join(str(s.pid) for s in c.status()), flush=True)\n"
        "time.sleep(600)\n"
    )
    root = Path(__file__).resolve().parents[1]
    notebook = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        pids = [int(p) for p in notebook.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(pids) == 2, "the cluster did not start"
        assert len(cluster.jobs()) == 1
    finally:
        notebook.kill()
        notebook.wait(timeout=10)


def _children(pid: int) -> set[int]:
    """Child processes of ``pid`` (slurmctld's own helper, slurmscriptd)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _write_conf(cluster: SlurmCluster, ctl_port: int, node_port: int, cpus: int) -> None:
    root = cluster.root
    ctl_host = socket.gethostname().split(".")[0]
    lines = [
        "ClusterName=mwtest",
        f"SlurmctldHost={ctl_host}({cluster.login.address})",
        f"SlurmctldPort={ctl_port}",
        f"SlurmdPort={node_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={cluster.munge_socket}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'spool' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=2",
        "MinJobAge=2",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
    ]
    for name, host in zip(cluster.node_names, cluster.net.hosts):
        lines.append(f"NodeName={name} NodeAddr={host.address} NodeHostname={name} "
                     f"CPUs={cpus} RealMemory=1000 State=UNKNOWN")
    lines.append(f"PartitionName=test Nodes={','.join(cluster.node_names)} Default=YES "
                 "MaxTime=INFINITE State=UP OverSubscribe=NO")
    cluster.conf.write_text("\n".join(lines) + "\n")


def _login_sshd(cluster: SlurmCluster) -> None:
    """Restart the login host's sshd with ``SetEnv SLURM_CONF=...``: its sessions find this cluster
    the way a real login node's find /etc/slurm/slurm.conf."""
    login = cluster.login
    keys = cluster.net.root / "keys"
    conf = keys / "sshd-login.conf"
    base = (keys / f"sshd{login.index}.conf").read_text()
    conf.write_text(base.replace(netns_hosts.setenv_line(netns_hosts.HOST_ENV),
                                 netns_hosts.setenv_line({**netns_hosts.HOST_ENV, "SLURM_CONF": str(cluster.conf)})))
    assert login.sshd is not None
    login.sshd.terminate()
    login.sshd.wait(timeout=10)
    login.sshd = subprocess.Popen(
        ["ip", "netns", "exec", login.netns, netns_hosts.SSHD, "-D", "-e", "-f", str(conf)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(keys / "sshd-login.log", "wb"))
    netns_hosts._wait_port(login.address, 22, timeout=15)


def _wait_socket(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"munged did not create {path}")
        time.sleep(0.02)


def create(nodes: int = 2, cpus: int = 2, suffix: str = "s") -> SlurmCluster:
    """Start a Slurm cluster of ``nodes`` nodes; on any failure everything made is removed.
    ``suffix`` tells apart the namespaces of two clusters in one test session."""
    net = netns_hosts.create(nodes + 1, suffix=suffix)  # beside the SSH tests' hosts of the same session
    cluster = SlurmCluster(net=net, root=Path(tempfile.mkdtemp(prefix="mwnb-slurm-")),
                           node_names=[f"mwnode{i}" for i in range(nodes)])
    try:
        _start(cluster, cpus)
    except BaseException:
        cluster.destroy()
        raise
    return cluster


def _start(cluster: SlurmCluster, cpus: int) -> None:
    root = cluster.root
    os.chmod(root, 0o755)
    for sub in ("state", "spool", "log", "munge"):
        (root / sub).mkdir(mode=0o700)
    for name in cluster.node_names:
        (root / "spool" / name).mkdir(mode=0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    # slurmd drains a node that declares more CPUs than the machine has.
    cpus = max(1, min(cpus, os.cpu_count() or 1))
    _write_conf(cluster, ctl_port=_free_port(), node_port=_free_port(), cpus=cpus)
    log_dir = root / "log"

    munged = _binary("munged")
    cluster.daemons["munged"] = subprocess.Popen(
        [str(munged), "--foreground", "--force", f"--socket={cluster.munge_socket}",
         f"--key-file={key}", f"--pid-file={root / 'munge' / 'munged.pid'}",
         f"--seed-file={root / 'munge' / 'munged.seed'}", f"--log-file={log_dir / 'munged.log'}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_socket(cluster.munge_socket, cluster.daemons["munged"], 10)

    env = {**os.environ, **cluster.env()}
    env.pop("SLURM_JOB_ID", None)
    _login_sshd(cluster)
    cluster.daemons["slurmctld"] = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{cluster.login.netns}",
         str(_binary("slurmctld")), "-D", "-c", "-i", "-f", str(cluster.conf)],
        stdin=subprocess.DEVNULL, stdout=open(log_dir / "slurmctld.out", "wb"),
        stderr=subprocess.STDOUT, env=env)
    for name, host in zip(cluster.node_names, cluster.net.hosts):
        cluster.daemons[f"slurmd-{name}"] = subprocess.Popen(
            # nsenter, not `ip netns exec`: the latter remounts /sys, hiding /sys/fs/cgroup, and
            # slurmd 22.05 refuses to start without it.
            ["nsenter", f"--net=/run/netns/{host.netns}", str(_binary("slurmd")), "-D", "-N", name,
             "-f", str(cluster.conf)],
            stdin=subprocess.DEVNULL, stdout=open(log_dir / f"slurmd-{name}.out", "wb"),
            stderr=subprocess.STDOUT, env=env)
    cluster.wait_idle(30)
