"""Holder of a private network namespace for local workers: ``unshare --net python -m
mwnotebook.processes.netns_holder N``.

It brings ``lo`` up inside the namespace, reserves N TCP ports there for TensorFlow's gRPC servers,
prints them as one line, and then lives exactly as long as its parent (stdin EOF or parent death).
Worker kernels join the namespace with ``nsenter``; their Jupyter channels are unix sockets, which
work across network namespaces, so only TensorFlow's unauthenticated ports move off the network.
"""

from __future__ import annotations

import fcntl
import signal
import socket
import struct
import sys

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def bring_loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def main() -> None:
    from mwnotebook.processes.shipped import owner_watch

    owner_watch.die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are for kernels, not for the namespace
    count = int(sys.argv[1])
    bring_loopback_up()
    from mwnotebook.config.tf_config import PortReservation

    reservation = PortReservation.reserve(count, bind_host="0.0.0.0")
    print(" ".join(str(p) for p in reservation.ports), flush=True)
    sys.stdin.read()  # returns at EOF: the launcher closed our stdin or died


if __name__ == "__main__":
    main()
