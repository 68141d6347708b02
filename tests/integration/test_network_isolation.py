"""TensorFlow's gRPC server binds all interfaces. With --network private the workers' ports live in
a private network namespace: a peer on another (test) host cannot reach them. With --network host
it can, which is what this test proves the isolation against.

The "other machine" is a network namespace this test makes (veth pair, 10.214.7.0/30); traffic only
ever goes to that pair's own addresses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

from mwnotebook import Cluster

pytestmark = pytest.mark.integration

# Stand-in for TensorFlow's server: listen on the worker's TF_CONFIG port on ALL interfaces, as TF does.
LISTEN_LIKE_TF = """
import json, os, socket
cfg = json.loads(os.environ["TF_CONFIG"])
port = int(cfg["cluster"]["worker"][cfg["task"]["index"]].rsplit(":", 1)[1])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
server.bind(("0.0.0.0", port))
server.listen()
probe = socket.create_connection(("127.0.0.1", port), timeout=2)  # reachable from inside
probe.close()
print(port)
"""

HOST_ADDR, PEER_ADDR = "10.214.7.1", "10.214.7.2"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def peer_host():
    """A second 'machine': a network namespace linked to this one by a veth pair."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 to make a test host namespace")
    name = f"mwpeer{uuid.uuid4().hex[:6]}"
    veth = f"mwv{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", name)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create network namespaces here: {exc.stderr.decode().strip()}")
    try:
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("addr", "add", f"{HOST_ADDR}/30", "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("-n", name, "addr", "add", f"{PEER_ADDR}/30", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def reachable_from_peer(namespace: str, port: int) -> bool:
    code = (f"import socket\ntry:\n    socket.create_connection(('{HOST_ADDR}', {port}), timeout=2).close(); print('open')\n"
            f"except OSError as e:\n    print('closed', e)")
    out = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=30).stdout
    return out.startswith("open")


@pytest.mark.parametrize("network, expect_reachable", [("private", False), ("host", True)])
def test_tf_ports_reachability_from_another_host(peer_host, network, expect_reachable):
    with Cluster(workers=2, network=network) as cluster:
        assert cluster.network_isolated is (network == "private")
        result = cluster.run(LISTEN_LIKE_TF)
        ports = [int(result.stdout(i)) for i in range(2)]
        listening = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
        assert all((f":{p} " in listening) is expect_reachable for p in ports)
        assert [reachable_from_peer(peer_host, p) for p in ports] == [expect_reachable] * 2
