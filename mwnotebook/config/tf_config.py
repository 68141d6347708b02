"""Pure TF_CONFIG helpers: port reservation, cluster spec, per-worker TF_CONFIG.

Never imports TensorFlow.

Ports are *reserved*, not just probed: :class:`PortReservation` keeps a socket bound to each chosen
port with ``SO_REUSEPORT`` for the life of the cluster. The kernel then never hands that port to
another ``bind(0)`` (another cluster, another program), while TensorFlow's gRPC server, which also
sets ``SO_REUSEPORT``, can still bind it. A bound socket that never listens accepts no connections,
so holding it exposes nothing.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from typing import Any


def cluster_spec(addresses: list[str]) -> dict[str, list[str]]:
    """The cluster mapping shared by every worker: ``{"worker": ["host:port", ...]}``."""
    if not addresses:
        raise ValueError("a cluster needs at least one worker address")
    return {"worker": list(addresses)}


def tf_config_for(addresses: list[str], index: int) -> dict[str, Any]:
    """TF_CONFIG of worker ``index``: the same cluster everywhere, only ``task.index`` differs."""
    if not 0 <= index < len(addresses):
        raise ValueError(f"worker index {index} is outside 0..{len(addresses) - 1}")
    return {"cluster": cluster_spec(addresses), "task": {"type": "worker", "index": index}}


def tf_config_json(addresses: list[str], index: int) -> str:
    """TF_CONFIG as the compact JSON string TensorFlow reads from the environment."""
    return json.dumps(tf_config_for(addresses, index), separators=(",", ":"))


def format_address(host: str, port: int) -> str:
    """``host:port``, with brackets around IPv6 literals."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


@dataclass
class PortReservation:
    """Ports held for one cluster until :meth:`release`."""

    ports: list[int]
    _sockets: list[socket.socket] = field(default_factory=list, repr=False)

    @classmethod
    def reserve(cls, count: int, bind_host: str = "0.0.0.0") -> PortReservation:
        """Pick ``count`` distinct free TCP ports and hold them."""
        held: list[socket.socket] = []
        try:
            for _ in range(count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if hasattr(socket, "SO_REUSEPORT"):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sock.bind((bind_host, 0))
                held.append(sock)
        except OSError:
            for sock in held:
                sock.close()
            raise
        return cls(ports=[s.getsockname()[1] for s in held], _sockets=held)

    @property
    def sockets(self) -> list[socket.socket]:
        """The bound sockets that hold :attr:`ports` (for a process that keeps holding them)."""
        return list(self._sockets)

    def release(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
