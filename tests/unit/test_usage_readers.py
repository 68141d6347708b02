"""CPU shares from raw counters, each reader over its own interval (mwnotebook/engine/usage.py): the
status table's poll while a cell runs must not shorten ``Cluster.usage()``'s interval (a poll just
after a cell's last busy second made the next status reading 0 %: seen in CI on the test Slurm)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from mwnotebook.engine.usage import UsageReader, cpu_share


def test_a_share_is_cpu_seconds_over_the_seconds_between_two_readings() -> None:
    assert cpu_share(3.0, 10.0, None) == 30.0  # since the start
    assert cpu_share(5.0, 12.0, (3.0, 10.0)) == 100.0
    assert cpu_share(5.0, 12.0, (5.0, 12.0)) == 0.0  # no time between: no division


class _RemoteHandle:
    """A remote kernel handle whose agent answers with the counters it is given (TakesUsage)."""

    index, host, pid = 0, "node1", 4242

    def __init__(self, counters: list[tuple[float, float]]) -> None:
        self.counters = counters

    async def take_usage(self, timeout: float) -> tuple[float | None, float | None, int | None, int | None, str]:
        cpu, age = self.counters.pop(0)
        return cpu, age, 100 << 20, 1 << 30, ""


def test_the_poll_does_not_shorten_the_status_readers_interval() -> None:
    # status at 10 s (1 CPU s), the poll at 13 s (4 CPU s: the cell's busy part), status again at 14 s
    handle = _RemoteHandle([(1.0, 10.0), (4.0, 13.0), (4.0, 14.0)])
    worker = SimpleNamespace(handle=handle)
    status, poll = UsageReader(), UsageReader()

    async def readings() -> list[float | None]:
        first = await status.read([worker])  # type: ignore[list-item]
        polled = await poll.read([worker])  # type: ignore[list-item]
        second = await status.read([worker])  # type: ignore[list-item]
        return [first[0].cpu_percent, polled[0].cpu_percent, second[0].cpu_percent]

    assert asyncio.run(readings()) == [10.0, 30.8, 75.0]


def test_a_reused_pid_is_counted_from_its_own_start() -> None:
    handle = _RemoteHandle([(50.0, 100.0), (1.0, 2.0)])  # the second answer: a new process, 2 s old
    worker = SimpleNamespace(handle=handle)
    reader = UsageReader()

    async def readings() -> list[float | None]:
        return [(await reader.read([worker]))[0].cpu_percent for _ in range(2)]  # type: ignore[list-item]

    assert asyncio.run(readings()) == [50.0, 50.0]
