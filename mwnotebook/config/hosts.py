"""Parse the ``--hosts`` strings that place workers on SSH hosts.

Grammar of one entry (entries are separated by commas)::

    [user@]host[:port][*count]      e.g.  gpu1   alice@gpu2:2222   gpu3*2   [fe80::1]:22*4

``host`` may be an alias from ``~/.ssh/config``; a missing user or port is left to SSH (the
config file, then the defaults). ``*count`` is the number of workers on that host; entries
without it get ``workers_per_host`` (default 1). Workers are numbered host by host in the order
given, so ``a*2,b*2`` puts workers 0 and 1 on ``a`` and workers 2 and 3 on ``b`` (worker 0, the
chief, is always on the first host).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

from mwnotebook.errors import ConfigError

__all__ = ["HostSpec", "parse_host", "parse_hosts", "resolve_host", "worker_hosts"]

_ENTRY = re.compile(
    r"""^(?:(?P<user>[^@\s:*\[\]]+)@)?          # user@
        (?:\[(?P<v6>[0-9A-Fa-f:.%\w]+)\]|(?P<name>[^@\s:*\[\]]+))  # host or [ipv6]
        (?::(?P<port>\d+))?                      # :port
        (?:\*(?P<count>\d+))?$                   # *count
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class HostSpec:
    """One SSH destination and how many workers it runs (``slots``; ``None`` = not given)."""

    host: str
    user: str | None = None
    port: int | None = None
    slots: int | None = None

    @property
    def target(self) -> str:
        """``[user@]host[:port]`` as a user would type it: how errors and status name the host."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"{self.user}@{host}" if self.user else host
        return f"{text}:{self.port}" if self.port else text

    @property
    def key(self) -> tuple[str, str | None, int | None]:
        """Identity of the SSH connection: workers with the same key share one connection."""
        return (self.host, self.user, self.port)

    def __str__(self) -> str:
        return self.target


def parse_host(entry: str) -> HostSpec:
    """Parse one ``[user@]host[:port][*count]`` entry; raise :class:`ConfigError` if malformed."""
    text = entry.strip()
    match = _ENTRY.match(text)
    if not text or match is None:
        raise ConfigError(
            f"bad host {entry!r}: expected [user@]host[:port][*workers], e.g. 'alice@gpu1:2222*2'"
        )
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"bad host {entry!r}: SSH port {port} is outside 1..65535")
    count = int(match["count"]) if match["count"] else None
    if count is not None and count < 1:
        raise ConfigError(f"bad host {entry!r}: the worker count after '*' must be at least 1")
    return HostSpec(host=match["v6"] or match["name"], user=match["user"], port=port, slots=count)


HostsArg = Union[str, Sequence[str | HostSpec]]


def parse_hosts(hosts: HostsArg, workers_per_host: int | None = None) -> list[HostSpec]:
    """Parse ``"a,b*2"`` or ``["a", "b*2"]`` into host specs with ``slots`` filled in.

    ``workers_per_host`` applies to entries without ``*count``.
    """
    if workers_per_host is not None and workers_per_host < 1:
        raise ConfigError(f"--workers-per-host must be at least 1, not {workers_per_host}")
    items = [hosts] if isinstance(hosts, str) else list(hosts)
    specs: list[HostSpec] = []
    for item in items:
        if isinstance(item, HostSpec):
            parsed = [item]
        else:
            parsed = [parse_host(part) for part in item.split(",") if part.strip()]
            if not parsed:
                raise ConfigError(f"bad host list {item!r}: no host in it")
        for spec in parsed:
            slots = spec.slots if spec.slots is not None else (workers_per_host or 1)
            specs.append(HostSpec(spec.host, spec.user, spec.port, slots))
    if not specs:
        raise ConfigError("--hosts needs at least one host")
    return specs


def worker_hosts(
    hosts: HostsArg, workers: int | None = None, workers_per_host: int | None = None
) -> list[HostSpec]:
    """The host of each worker, indexed by worker number.

    ``workers`` (if given) must equal the number of worker slots in ``hosts``: a silent
    mismatch would leave a host idle or overload one, so it is an error instead.
    """
    placement: list[HostSpec] = []
    for spec in parse_hosts(hosts, workers_per_host):
        placement.extend([spec] * (spec.slots or 1))
    if workers is not None and workers != len(placement):
        listed = ",".join(f"{s.target}*{s.slots}" for s in parse_hosts(hosts, workers_per_host))
        raise ConfigError(
            f"{workers} workers requested but --hosts {listed} has {len(placement)} worker slots; "
            "drop --workers, or change the '*N' counts / --workers-per-host"
        )
    return placement


def parse_tf_address(value: str | None, placement: Sequence[HostSpec]) -> dict[str, str]:
    """``--tf-address``: ``ADDR`` (one host only) or ``host=ADDR,host2=ADDR2``, keyed by the host
    as written in ``--hosts`` (with or without ``user@``/``:port``)."""
    if not value:
        return {}
    targets = {spec.target: spec for spec in placement}
    if "=" not in value:
        if len({spec.key for spec in placement}) > 1:
            raise ConfigError(
                f"--tf-address {value} names one address but the workers are on several hosts; "
                "write host=address pairs, e.g. --tf-address a=10.0.0.1,b=10.0.0.2"
            )
        return {spec.target: value.strip() for spec in placement}
    result: dict[str, str] = {}
    for pair in value.split(","):
        name, _, addr = pair.partition("=")
        name, addr = name.strip(), addr.strip()
        matches = [t for t, s in targets.items() if name in (t, s.host)]
        if not matches or not addr:
            raise ConfigError(f"--tf-address {pair!r}: {name!r} is not one of the --hosts")
        for target in matches:
            result[target] = addr
    return result


def resolve_host(name: str, placement: Sequence[HostSpec]) -> HostSpec:
    """The host ``name`` means (``--place``): a ``--hosts`` entry when it names one (as written, or
    its bare host name), else a host of its own in the same syntax (without ``*count``)."""
    text = name.strip()
    for spec in placement:
        if text in (spec.target, spec.host):
            return HostSpec(spec.host, spec.user, spec.port, 1)
    spec = parse_host(text)
    if spec.slots is not None:
        raise ConfigError(f"--place host {name!r}: '*N' counts workers and belongs in --hosts; "
                          f"write {spec.target}")
    return HostSpec(spec.host, spec.user, spec.port, 1)
