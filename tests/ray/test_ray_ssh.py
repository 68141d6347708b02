"""``--ray-ssh HOST``: the workers of the real Ray test cluster (ray_nodes.py: head 127.0.0.1, nodes
127.0.0.2 and 127.0.0.3) reached through SSH forwards over one connection to a real OpenSSH sshd on
the head's address (key authentication, a known_hosts file, an ssh config alias, as a user has).

What proves the forwards: the connection info the notebook uses names 127.0.0.1 and ports other
than the kernel's own (its connection file on the node names the node's address), and sshd's log
(LogLevel DEBUG1) shows a direct-tcpip channel to the node's address for every kernel port, for
the relays' ports and for the head's Ray Client port. ``ray_env`` checks after each test that no
relay actor is left.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from mwnotebook import Cluster, ClusterRunError, ClusterSpec, ClusterStartError
from mwnotebook.config.options import add_cluster_arguments, spec_from_options
from mwnotebook.errors import ConfigError
from mwnotebook.launchers.ray.launcher import RayLauncher
from testbed import ray_nodes
from testbed.seed_cell import SEED_CELL, WHERE_LINE, expected_line
from tests._shared.waits import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
#: ``debug1: server_request_direct_tcpip: originator 127.0.0.1 port 4711, target 127.0.0.2 port 40123``
DIRECT_TCPIP = re.compile(r"server_request_direct_tcpip: originator \S+ port \d+, target (\S+) port (\d+)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class HeadSSH:
    """A real sshd on the head's address and an ssh config naming it ``rayhead`` (and ``rayhead-refused``,
    a port nothing listens on)."""

    root: Path
    port: int
    config: Path
    log: Path
    sshd: subprocess.Popen[bytes]
    alias: str = "rayhead"
    refused: str = "rayhead-refused"

    def direct_targets(self) -> list[tuple[str, int]]:
        """Every direct-tcpip channel sshd opened so far: ``(address, port)`` on its side."""
        text = self.log.read_text(errors="replace")
        return [(m[1], int(m[2])) for m in DIRECT_TCPIP.finditer(text)]

    def sessions(self) -> list[psutil.Process]:
        """sshd's per-connection processes (a connection of ours while it is open)."""
        try:
            return [p for p in psutil.Process(self.sshd.pid).children(recursive=True) if p.is_running()
                    and p.status() != psutil.STATUS_ZOMBIE]
        except psutil.NoSuchProcess:
            return []


def _keygen(path: Path) -> str:
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                   capture_output=True, timeout=20)
    return path.with_suffix(".pub").read_text().strip()


@pytest.fixture(scope="module")
def head_ssh() -> Iterator[HeadSSH]:
    root = Path(tempfile.mkdtemp(prefix="mwnb-ray-ssh-"))
    root.chmod(0o700)
    client_pub = _keygen(root / "id_ed25519")
    host_pub = _keygen(root / "host_ed25519")
    (root / "authorized_keys").write_text(client_pub + "\n")
    port = _free_port()
    (root / "sshd.conf").write_text("\n".join([
        "ListenAddress 127.0.0.1", f"Port {port}", f"HostKey {root / 'host_ed25519'}",
        f"PidFile {root / 'sshd.pid'}", f"AuthorizedKeysFile {root / 'authorized_keys'}",
        "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "UsePAM no", "StrictModes no", "AllowTcpForwarding yes", "LogLevel DEBUG1", ""]))
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_pub.split()[:2])}\n")
    common = ["    User root", f"    IdentityFile {root / 'id_ed25519'}", "    IdentitiesOnly yes",
              f"    UserKnownHostsFile {root / 'known_hosts'}", "    StrictHostKeyChecking yes", ""]
    config = root / "ssh_config"
    config.write_text("\n".join(["Host rayhead", "    HostName 127.0.0.1", f"    Port {port}", *common,
                                 "Host rayhead-refused", "    HostName 127.0.0.1", f"    Port {_free_port()}",
                                 *common]))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    log = root / "sshd.log"
    with open(log, "wb") as err:
        sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd.conf")], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert sshd.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        yield HeadSSH(root, port, config, log, sshd)
    finally:
        sshd.terminate()
        sshd.wait(10)
        shutil.rmtree(root, ignore_errors=True)


#: Where a Ray started on this machine by Ray's auto-init (a call to Ray after its connection was
#: lost) would leave its session and its token: neither may appear.
LOCAL_RAY = (Path(tempfile.gettempdir()) / "ray", Path.home() / ".ray" / "auth_token")


def _local_ray() -> set[str]:
    sessions, token = LOCAL_RAY
    return {str(p) for p in sessions.glob("session_2*")} | ({str(token)} if token.exists() else set())


@pytest.fixture
def laptop(ray_env: ray_nodes.RayTestCluster, head_ssh: HeadSSH,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[HeadSSH]:
    """This process with the ssh config that names the head (no agent); afterwards the check that
    no local Ray was started here."""
    monkeypatch.setenv("MWNOTEBOOK_SSH_CONFIG", str(head_ssh.config))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    before = _local_ray()
    yield head_ssh
    started = _local_ray() - before
    for path in map(Path, started):  # the token would turn on Ray's token check for the next cluster's nodes
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    assert not started, f"a local Ray was started by the notebook: {started}"


def _kernel_file(remote_dir: str) -> dict[str, object]:
    """The kernel's own connection file on its node (the nodes share this machine's files)."""
    files = sorted(Path(remote_dir).glob("*.json"))
    assert files, f"no connection file in {remote_dir}"
    return dict(json.loads(files[0].read_text()))


PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def test_the_option_gives_the_field_and_bad_input_is_named() -> None:
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    spec = spec_from_options(parser.parse_args(shlex.split("--ray ray://localhost:10001 --ray-ssh alice@head:2222")))
    assert (spec.ray, spec.ray_ssh) == ("ray://localhost:10001", "alice@head:2222")
    for fields, message in [({"ray_ssh": "head"}, "give --ray ADDRESS with it"),
                            ({"ray": "auto", "ray_ssh": "head*2"}, "one SSH host"),
                            ({"ray": "auto", "ray_ssh": "a b"}, "--ray-ssh: bad host"),
                            ({"ray": "auto", "ray_ssh": " "}, "--ray-ssh needs the SSH host")]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            ClusterSpec(**fields)  # type: ignore[arg-type]


def test_the_seed_through_ray_client_and_ssh_forwards(laptop: HeadSSH, ray_env: ray_nodes.RayTestCluster) -> None:
    """``--ray ray://127.0.0.1:PORT --ray-ssh rayhead``: the Ray Client connection, each relay's
    channel and each kernel port go through the one SSH connection; the workers' TF addresses are
    the nodes' own; the seed's line comes from both workers; the connection closes with the cluster."""
    before = len(laptop.direct_targets())
    client_host, client_port = ray_env.client_address.removeprefix("ray://").rsplit(":", 1)
    with Cluster(ray=ray_env.client_address, ray_ssh=laptop.alias, cpu=True, workers=2) as cluster:
        cluster.start()
        workers = cluster.tf_configs[0]["cluster"]["worker"]
        assert sorted(w.rsplit(":", 1)[0] for w in workers) == ["127.0.0.2", "127.0.0.3"], workers
        launcher = cluster.launcher
        assert isinstance(launcher, RayLauncher)
        targets = laptop.direct_targets()[before:]
        assert (client_host, int(client_port)) in targets, targets  # Ray Client through SSH
        handles = launcher.handles
        assert len(handles) == 2
        assert len(laptop.sessions()) >= 1
        result = cluster.run(SEED_CELL + WHERE_LINE, timeout=300)
        for i in range(2):
            lines = result.stdout(i).splitlines()
            assert expected_line(i) in lines, result.stdout(i)[-2000:]
            assert f"at {workers[i].rsplit(':', 1)[0]}" in lines, lines
        # The notebook's connection info names local forwards; the kernel's own file its node's
        # address; sshd opened a channel to the node's address for the kernel's sockets in use.
        targets = laptop.direct_targets()[before:]
        for handle in handles:
            info = handle.connection_info
            own = _kernel_file(handle.remote_dir)
            assert info["ip"] == "127.0.0.1" and own["ip"] == handle.host, (info, own)
            for name in PORTS:
                assert info[name] != own[name], (name, info, own)
            for name in ("shell_port", "iopub_port"):
                assert (handle.host, own[name]) in targets, (name, own, targets)
    assert wait_until(lambda: not laptop.sessions(), 15), laptop.sessions()
    assert wait_until(lambda: not ray_env.actor_pids(), 30), ray_env.actor_pids()
    assert all(state == "REMOVED" for state in ray_env.placement_group_states())


def test_a_refused_ssh_host_fails_before_anything_is_placed(laptop: HeadSSH, ray_env: ray_nodes.RayTestCluster) -> None:
    import ray

    groups = ray_env.placement_group_states()
    started = time.monotonic()
    with pytest.raises(ClusterStartError) as info:
        with Cluster(ray=ray_env.address, ray_ssh=laptop.refused, cpu=True) as cluster:
            cluster.start()
    print(f"refused --ray-ssh: the error after {time.monotonic() - started:.1f} s")
    text = str(info.value)
    assert text.startswith(f"--ray-ssh {laptop.refused}: ") and "refused" in text.lower(), text
    assert not ray.is_initialized()  # Ray was never asked: nothing placed
    assert ray_env.placement_group_states() == groups
    assert not ray_env.actor_pids()


@pytest.mark.parametrize("through", ["ray_client", "driver"])
def test_a_lost_ssh_connection_is_a_lost_cluster(laptop: HeadSSH, ray_env: ray_nodes.RayTestCluster,
                                                 caplog: pytest.LogCaptureFixture, through: str) -> None:
    """The SSH connection dies mid-cell: the cell fails naming it, the next cell runs on a fresh
    cluster, and stopping leaves nothing. Through Ray Client the Ray connection dies with it (and no
    call to Ray may start a local Ray: ``laptop`` checks); a driver on the head's GCS address (the
    notebook on a node whose peers' ports are closed to it but SSH is not) keeps its own."""
    address = ray_env.client_address if through == "ray_client" else ray_env.address
    with Cluster(ray=address, ray_ssh=laptop.alias, cpu=True, workers=2) as cluster:
        cluster.start()
        assert len(laptop.sessions()) >= 1
        pids = [s.pid for s in cluster.status()]
        sessions = laptop.sessions()

        def cut() -> None:
            time.sleep(3)
            for proc in sessions:
                proc.kill()

        import threading

        threading.Thread(target=cut, daemon=True).start()
        started = time.monotonic()
        with pytest.raises(ClusterRunError) as info:
            cluster.run("import time\nprint('running', flush=True)\ntime.sleep(120)", timeout=200)
        print(f"SSH connection cut 3 s into the cell: the cell's error after {time.monotonic() - started:.1f} s: "
              f"{info.value}")
        assert "--ray-ssh" in str(info.value) and "lost" in str(info.value), info.value
        if through == "ray_client":
            time.sleep(35)  # past Ray Client's reconnection grace: it has given up, and says Ray is not initialized
        # The next cell: the restart through the lost connection fails, named; a fresh cluster (a
        # new SSH connection, new relays) runs the cell.
        result = cluster.run("print('again')", timeout=300)
        assert [result.stdout(i).split() for i in range(2)] == [["again"], ["again"]]
        assert "--ray-ssh rayhead: the SSH connection was lost" in caplog.text, caplog.text
    assert wait_until(lambda: not ray_env.actor_pids(), 30), ray_env.actor_pids()
    assert all(state == "REMOVED" for state in ray_env.placement_group_states())
    assert all(pid is not None and not psutil.pid_exists(pid) for pid in pids), pids
