import json
import socket

import pytest

from mwnotebook.config.tf_config import PortReservation, format_address, tf_config_for, tf_config_json


def test_cluster_is_identical_and_only_index_differs():
    addresses = ["127.0.0.1:1000", "127.0.0.1:1001", "127.0.0.1:1002"]
    configs = [tf_config_for(addresses, i) for i in range(3)]
    assert all(c["cluster"] == {"worker": addresses} for c in configs)
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]


def test_json_matches_the_seed_layout():
    text = tf_config_json(["127.0.0.1:12345", "127.0.0.1:23456"], 1)
    assert text == ('{"cluster":{"worker":["127.0.0.1:12345","127.0.0.1:23456"]},'
                    '"task":{"type":"worker","index":1}}')
    assert json.loads(text)["task"]["index"] == 1


@pytest.mark.parametrize("index", [-1, 2])
def test_index_out_of_range(index):
    with pytest.raises(ValueError, match="outside"):
        tf_config_for(["a:1", "b:2"], index)


def test_ipv6_addresses_are_bracketed():
    assert format_address("::1", 80) == "[::1]:80"
    assert format_address("host", 80) == "host:80"


def test_reserved_ports_are_distinct_and_not_handed_out_again():
    first = PortReservation.reserve(4)
    second = PortReservation.reserve(4)
    try:
        assert len(set(first.ports)) == 4
        assert not set(first.ports) & set(second.ports)
        # A plain bind (no SO_REUSEPORT) to a held port fails: nobody else can take it.
        probe = socket.socket()
        with pytest.raises(OSError):
            probe.bind(("0.0.0.0", first.ports[0]))
        probe.close()
    finally:
        first.release()
        second.release()


def test_a_reserved_port_can_be_bound_by_a_reuseport_server():
    """TensorFlow's gRPC server sets SO_REUSEPORT; it must be able to bind a held port."""
    held = PortReservation.reserve(1)
    try:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        server.bind(("0.0.0.0", held.ports[0]))
        server.listen()
        server.close()
    finally:
        held.release()
