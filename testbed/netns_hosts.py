"""Throwaway SSH test hosts: Linux network namespaces, each with its own address and sshd.

Layout (``TAG`` = this process id in hex, so parallel runs never collide)::

    root namespace:  veth mwvTAG  10.213.N.1/24  <->  uplink ─┐
                                                              ├ bridge br0 in netns mwnb-TAG-sw
           eth0 10.213.N.10 in netns mwnb-TAG-0  <->  h0 ─────┤   (sshd :22 in each host)
           eth0 10.213.N.11 in netns mwnb-TAG-1  <->  h1 ─────┘

The bridge lives in its own "switch" namespace, not in the root one: where br_netfilter is loaded
(Docker hosts), bridged traffic in the root namespace goes through its iptables FORWARD chain,
often with a DROP policy; a fresh namespace has no rules. The root namespace is only an endpoint
(the notebook's side of SSH), so nothing is forwarded there either.

The addresses exist only on these interfaces; ``N`` is picked so that the /24 is unused on this
machine. Keys (host keys, the client key, known_hosts, an ssh client config) live in a temporary
directory; ``home`` is a directory laid out like a user's home (``home/.ssh/config`` with aliases
``mwhost0``, ``mwhost1``, plus ``mwhost1-badkey`` whose known_hosts holds a wrong key) so that
code under test finds them the way it finds a real user's. The sshds allow only 2 sessions per
connection, so that tests exercise what real servers (MaxSessions 10) do to many workers per host.
The namespaces share the root filesystem, so the "remote" Python is this machine's interpreter.
Needs root; :func:`unavailable_reason` says why not, for a clear skip.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import mwnotebook

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
NS_PREFIX = "mwnb-"

#: The checkout whose mwnotebook is under test (the test hosts share this machine's files).
CHECKOUT = str(Path(mwnotebook.__file__).resolve().parent.parent)
#: Every session on the test hosts gets this (sshd ``SetEnv``): their kernels must import the
#: mwnotebook under test, not wherever the editable install points.
HOST_ENV = {"PYTHONPATH": CHECKOUT}


def setenv_line(env: dict[str, str]) -> str:
    """One sshd ``SetEnv`` line (sshd keeps only the first such line: add to it, never append one)."""
    return "SetEnv " + " ".join(f"{k}={v}" for k, v in env.items())



def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


def unavailable_reason() -> str | None:
    """Why namespace test hosts cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "remote tests need root to create network namespaces (ip netns add)"
    for tool in ("ip", SSHD, SSH_KEYGEN):
        if shutil.which(tool) is None and not Path(tool).exists():
            return f"remote tests need {tool} (apt-get install iproute2 openssh-server)"
    probe = f"{NS_PREFIX}probe-{os.getpid():06x}"
    result = _ip("netns", "add", probe, check=False)
    if result.returncode != 0:
        return f"`ip netns add` failed here: {result.stderr.strip()}"
    try:
        entered = _ip("netns", "exec", probe, "true", check=False)
    finally:
        _ip("netns", "del", probe, check=False)
    if entered.returncode != 0:
        return f"`ip netns exec` failed here: {entered.stderr.strip()}"
    return None


#: The "other machine" of the network isolation tests (:func:`peer_namespace`): a veth pair on
#: 10.214.7.0/30, this side's address and the peer's; traffic only ever goes to the pair's own addresses.
PEER_LINK_ADDR, PEER_ADDR = "10.214.7.1", "10.214.7.2"


@contextmanager
def peer_namespace() -> Iterator[str]:
    """A second 'machine': a network namespace linked to this one by a veth pair; yields its name.
    Raises :class:`RuntimeError` saying why (before anything is made) when this machine cannot make one."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        raise RuntimeError("needs root and iproute2 to make a test host namespace")
    name = f"mwpeer{uuid.uuid4().hex[:6]}"
    veth = f"mwv{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        raise RuntimeError(f"cannot create network namespaces here: {made.stderr.strip()}")
    try:
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("addr", "add", f"{PEER_LINK_ADDR}/30", "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("-n", name, "addr", "add", f"{PEER_ADDR}/30", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        _ip("link", "del", veth, check=False)
        _ip("netns", "del", name, check=False)


def reachable_from_peer(namespace: str, port: int) -> bool:
    """Whether a TCP connection from the peer ``namespace`` to this side's ``port`` opens."""
    code = (f"import socket\ntry:\n    socket.create_connection(('{PEER_LINK_ADDR}', {port}), timeout=2).close(); "
            f"print('open')\nexcept OSError as e:\n    print('closed', e)")
    out = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=30).stdout
    return out.startswith("open")


def ns_pids(netns: str) -> set[int]:
    """Process ids running in a network namespace."""
    result = _ip("netns", "pids", netns, check=False)
    return {int(p) for p in result.stdout.split()}


def parent_pid(pid: int) -> int:
    """The parent of a process (of a forked worker kernel: its worker template)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def running(pid: int) -> bool:
    """The process exists and is not a zombie. A forked worker whose template ended first is
    reparented to PID 1, and where PID 1 reaps no orphans (some containers) its corpse stays in /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def describe_pids(pids: set[int]) -> list[str]:
    out = []
    for pid in sorted(pids):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmd = "?"
        out.append(f"{pid}: {cmd[:160]}")
    return out


@dataclass
class TestHost:
    index: int
    netns: str
    address: str
    alias: str
    sshd: subprocess.Popen[bytes] | None = None

    def leftover_pids(self) -> set[int]:
        """Processes in this host's namespace other than the listening sshd."""
        listening = {self.sshd.pid} if self.sshd else set()
        return ns_pids(self.netns) - listening

    def exec(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.netns, *argv], capture_output=True,
                              text=True, timeout=timeout)


@dataclass
class TestNet:
    """The bridge, the hosts and the key material. Use :func:`create` / :meth:`destroy`."""

    tag: str
    subnet: int
    root: Path
    hosts: list[TestHost] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{NS_PREFIX}{self.tag}-sw"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def ssh_config(self) -> Path:
        return self.home / ".ssh" / "config"

    def address(self, last: int) -> str:
        return f"10.213.{self.subnet}.{last}"

    def use_as_home(self) -> None:
        """Point this process at the hosts the way a user's own ``~/.ssh`` would (for benchmarks;
        tests do the same through the ``ssh_home`` fixture, undone after each test)."""
        os.environ["HOME"] = str(self.home)  # ~/.ssh/config, the client key, known_hosts
        os.environ["MWNOTEBOOK_SSH_CONFIG"] = str(self.ssh_config)
        os.environ.pop("SSH_AUTH_SOCK", None)

    def wait_no_leftovers(self, timeout: float = 10.0) -> dict[str, list[str]]:
        """Wait until no host runs anything but its sshd; return what is left per host."""
        deadline = time.monotonic() + timeout
        while True:
            left = {h.netns: describe_pids(h.leftover_pids()) for h in self.hosts}
            left = {k: v for k, v in left.items() if v}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def destroy(self) -> None:
        for host in self.hosts:
            for pid in ns_pids(host.netns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if host.sshd is not None:
                try:
                    host.sshd.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            _ip("netns", "del", host.netns, check=False)
        _ip("netns", "del", self.switch, check=False)  # takes the root end's veth with it
        shutil.rmtree(self.root, ignore_errors=True)


def _pick_subnet() -> int:
    # Routes count as used too: a blackhole route (testbed/slurm_cluster.py) left by a killed
    # run would make every connect to that subnet fail with EINVAL.
    used = _ip("-o", "-4", "addr", "show").stdout + _ip("-4", "route", "show").stdout
    start = os.getpid() % 200 + 20
    for offset in range(230):
        n = (start + offset) % 250 + 1
        if f"10.213.{n}." not in used:
            return n
    raise RuntimeError("no free 10.213.N.0/24 test subnet")


def _remove_stale_blackholes() -> None:
    """Blackhole routes to test addresses whose net is gone: a run killed while its nodes were made
    unreachable (testbed/slurm_cluster.py) never deleted them. A live net owns its subnet's
    address on the root veth, so a route without such an address is nobody's."""
    addresses = _ip("-o", "-4", "addr", "show").stdout
    for line in _ip("-4", "route", "show", "type", "blackhole", check=False).stdout.splitlines():
        match = re.search(r"(10\.213\.\d+\.)\d+", line)
        if match and match.group(1) not in addresses:
            _ip("route", "del", *line.split(), check=False)


def _remove_stale() -> None:
    """Namespaces left by test runs whose process is gone (a killed pytest)."""
    _remove_stale_blackholes()
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if not name.startswith(NS_PREFIX) or len(parts) < 3:
            continue
        try:
            pid = int(parts[1], 16)
        except ValueError:
            continue
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            for p in ns_pids(name):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _ip("netns", "del", name, check=False)


def _keygen(path: Path, comment: str) -> str:
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=20)
    return path.with_suffix(".pub").read_text().strip()


def _wait_port(address: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


#: Held while a net picks its subnet and takes it (tools/test.sh runs the suite on several
#: processes, and the SSH hosts and the Slurm cluster may be made by two of them at once).
SUBNET_LOCK = Path(tempfile.gettempdir()) / "mwnb-test-subnets.lock"


def create(count: int = 2, suffix: str = "") -> TestNet:
    """Make ``count`` test hosts; on any failure everything made so far is removed. ``suffix`` tells
    apart several nets of one process (the SSH hosts and the Slurm nodes of one test session)."""
    with open(SUBNET_LOCK, "a") as lock:
        # A subnet is free while no interface has an address in it: pick one and put the root
        # end's address on it (in _build) before another process may look.
        fcntl.flock(lock, fcntl.LOCK_EX)
        _remove_stale()
        tag = f"{os.getpid():06x}" + (f"-{suffix}" if suffix else "")
        net = TestNet(tag=tag, subnet=_pick_subnet(), root=Path(tempfile.mkdtemp(prefix="mwnb-ssh-")))
        try:
            _build(net, count)
        except BaseException:
            net.destroy()
            raise
    return net


def _build(net: TestNet, count: int) -> None:
    keys = net.root / "keys"
    keys.mkdir(mode=0o700)
    ssh_dir = net.home / ".ssh"
    ssh_dir.mkdir(parents=True, mode=0o700)
    client_pub = _keygen(ssh_dir / "id_ed25519", "mwnotebook-test-client")
    (keys / "authorized_keys").write_text(client_pub + "\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory

    sw = net.switch
    _ip("netns", "add", sw)
    _ip("-n", sw, "link", "add", "br0", "type", "bridge")
    _ip("-n", sw, "link", "set", "br0", "up")
    root_veth = f"mwv{net.tag}"
    _ip("link", "add", root_veth, "type", "veth", "peer", "name", "uplink", "netns", sw)
    _ip("-n", sw, "link", "set", "dev", "uplink", "master", "br0")
    _ip("-n", sw, "link", "set", "dev", "uplink", "up")
    _ip("addr", "add", f"{net.address(1)}/24", "dev", root_veth)
    _ip("link", "set", root_veth, "up")

    known_hosts: list[str] = []
    config: list[str] = []
    for i in range(count):
        host = TestHost(index=i, netns=f"{NS_PREFIX}{net.tag}-{i}", address=net.address(10 + i),
                        alias=f"mwhost{i}")
        net.hosts.append(host)
        _ip("netns", "add", host.netns)
        _ip("-n", sw, "link", "add", f"h{i}", "type", "veth", "peer", "name", "eth0",
            "netns", host.netns)
        _ip("-n", sw, "link", "set", f"h{i}", "master", "br0")
        _ip("-n", sw, "link", "set", f"h{i}", "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")

        host_key = keys / f"host{i}_ed25519"
        host_pub = _keygen(host_key, f"mwhost{i}")
        known_hosts.append(f"{host.address} {' '.join(host_pub.split()[:2])}")
        sshd_config = keys / f"sshd{i}.conf"
        sshd_config.write_text("\n".join([
            f"ListenAddress {host.address}",
            "Port 22",
            f"HostKey {host_key}",
            f"PidFile {keys / f'sshd{i}.pid'}",
            f"AuthorizedKeysFile {keys / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "AllowTcpForwarding yes",
            # Low on purpose: real servers allow 10 sessions per connection, and the launcher
            # must open more connections when a host runs more workers than that.
            "MaxSessions 2",
            "MaxStartups 64",
            # As on many real servers: a session whose client vanished while the host was cut off
            # (its close never arrived) ends when the next probe meets the client's reset, or after
            # 20 s of silence, instead of TCP's hours; an outage shorter than that keeps the session.
            "ClientAliveInterval 5",
            "ClientAliveCountMax 4",
            "LogLevel ERROR",
            setenv_line(HOST_ENV),
            "",
        ]))
        host.sshd = subprocess.Popen(
            ["ip", "netns", "exec", host.netns, SSHD, "-D", "-e", "-f", str(sshd_config)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(keys / f"sshd{i}.log", "wb"),
        )
        config += [f"Host {host.alias}", f"    HostName {host.address}", "    User root", ""]
    for host in net.hosts:
        _wait_port(host.address, 22, timeout=15)

    (ssh_dir / "known_hosts").write_text("\n".join(known_hosts) + "\n")
    # An alias whose known_hosts holds another key for host 1: a host-key mismatch.
    other_pub = _keygen(keys / "impostor_ed25519", "impostor")
    (keys / "known_hosts_mismatch").write_text(
        f"{net.hosts[-1].address} {' '.join(other_pub.split()[:2])}\n")
    config += [f"Host {net.hosts[-1].alias}-badkey", f"    HostName {net.hosts[-1].address}",
               "    User root", f"    UserKnownHostsFile {keys / 'known_hosts_mismatch'}", ""]
    config += ["Host *", f"    IdentityFile {ssh_dir / 'id_ed25519'}",
               f"    UserKnownHostsFile {ssh_dir / 'known_hosts'}", ""]
    net.ssh_config.write_text("\n".join(config))
