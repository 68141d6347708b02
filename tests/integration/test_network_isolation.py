"""TensorFlow's gRPC server binds all interfaces. With --network private the workers' ports live in
a private network namespace: a peer on another (test) host cannot reach them. With --network host
it can, which is what this test proves the isolation against.

The "other machine" is a network namespace (the ``peer_host`` fixture of tests/conftest.py,
testbed/netns_hosts.py ``peer_namespace``: a veth pair on 10.214.7.0/30); traffic only ever goes to
that pair's own addresses.
"""

from __future__ import annotations

import subprocess

import pytest

from mwnotebook import Cluster
from testbed.netns_hosts import reachable_from_peer

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

@pytest.mark.parametrize("network, expect_reachable", [("private", False), ("host", True)])
def test_tf_ports_reachability_from_another_host(peer_host, network, expect_reachable):
    with Cluster(workers=2, network=network) as cluster:
        assert cluster.network_isolated is (network == "private")
        result = cluster.run(LISTEN_LIKE_TF)
        ports = [int(result.stdout(i)) for i in range(2)]
        listening = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
        assert all((f":{p} " in listening) is expect_reachable for p in ports)
        assert [reachable_from_peer(peer_host, p) for p in ports] == [expect_reachable] * 2
