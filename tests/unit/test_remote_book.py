"""The remote launchers' shared tail (mwnotebook/launchers/remote/book.py): a port holder is configured
in the ``ports`` role, its first event's ports become ``host:port`` per task, and the release closes
every holder (a failed one too) and the agents started ahead. Real agents: tests/remote, tests/slurm,
tests/ray."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from mwnotebook.launchers.remote.agent_events import AgentEvent
from mwnotebook.launchers.remote.book import RemoteBook


class _Agent:
    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.closed = False

    def configure(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)

    async def close(self) -> None:
        self.closed = True


def test_reserved_ports_become_addresses_on_the_named_host_and_are_released() -> None:
    async def scenario() -> None:
        book, holder, spare = RemoteBook(), _Agent(), _Agent()
        addresses = ["", "", ""]

        async def answer() -> AgentEvent:
            return {"event": "ports", "ports": [41001, 41002], "address": "10.0.0.5"}

        await book.reserve_ports(holder, [0, 2], ["tensorflow"], answer, lambda e: str(e["address"]), addresses)
        assert holder.config == {"role": "ports", "count": 2, "require": ["tensorflow"]}
        assert addresses == ["10.0.0.5:41001", "", "10.0.0.5:41002"]
        await book.release_ports(also=[spare])
        assert holder.closed and spare.closed

    asyncio.run(scenario())


def test_a_holder_whose_first_event_failed_is_released_too() -> None:
    async def scenario() -> None:
        book, holder = RemoteBook(), _Agent()

        async def fails() -> AgentEvent:
            raise RuntimeError("host: no answer from the remote agent within 20 s")

        with pytest.raises(RuntimeError):
            await book.reserve_ports(holder, [0], [], fails, lambda e: "h", [""])
        await book.release_ports()
        assert holder.closed

    asyncio.run(scenario())
