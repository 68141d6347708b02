"""Optional launcher and handle capabilities (mwnotebook/launchers/capabilities.py): the real
implementations satisfy their Protocols, and the engine uses a capability exactly when it is there."""

from __future__ import annotations

import asyncio
from typing import Any

from mwnotebook import AsyncCluster, ClusterSpec
from mwnotebook.engine.cell.stacks import _dump_one
from mwnotebook.launchers.capabilities import (
    AbortsStart,
    HasConnectionFile,
    HasLogTail,
    Isolates,
    OwnsAllocation,
    ReportsJob,
    TakesStacks,
)
from mwnotebook.launchers.local.handles import LocalKernelHandle
from mwnotebook.launchers.local.launcher import LocalLauncher
from mwnotebook.launchers.remote.kernel_handle import RemoteKernelHandle
from mwnotebook.launchers.slurm.launcher import SlurmLauncher


def test_real_launchers_declare_what_they_have() -> None:
    local = LocalLauncher(template=False)
    try:
        assert isinstance(local, Isolates) and not local.isolated
        assert not isinstance(local, AbortsStart) and not isinstance(local, ReportsJob)
        assert not isinstance(local, OwnsAllocation)
    finally:
        asyncio.run(local.close())
    slurm = SlurmLauncher.from_spec(ClusterSpec(slurm="", workers=2))
    assert isinstance(slurm, AbortsStart) and isinstance(slurm, ReportsJob)
    assert isinstance(slurm, OwnsAllocation) and slurm.owns_allocation is False  # nothing made yet
    assert not isinstance(slurm, Isolates)


def test_real_handles_declare_what_they_have(tmp_path: Any) -> None:
    handle = LocalKernelHandle(0, None, {}, str(tmp_path / "k.json"), str(tmp_path / "k.log"))
    assert isinstance(handle, HasLogTail) and isinstance(handle, HasConnectionFile)
    assert handle.on_this_machine is True and RemoteKernelHandle.on_this_machine is False  # stated by each
    assert issubclass(RemoteKernelHandle, HasLogTail) and issubclass(RemoteKernelHandle, TakesStacks)
    assert "connection_file" not in dir(RemoteKernelHandle)  # its stacks are taken on its host, by its agent
    assert not isinstance(handle, TakesStacks)


class _Handle:
    host = "localhost"
    on_this_machine = True
    pid = 4242
    index = 0
    connection_info: dict[str, Any] = {}

    async def is_alive(self) -> bool:
        return True

    def exit_description(self) -> str:
        return ""

    async def interrupt(self) -> None:
        pass

    async def kill(self) -> None:
        pass


class _Launcher:
    """A launcher with none of the optional capabilities."""

    async def tf_addresses(self, count: int) -> list[str]:
        return [f"127.0.0.1:{1000 + i}" for i in range(count)]

    async def start(self, index: int, env: Any) -> _Handle:
        return _Handle()

    async def close(self) -> None:
        pass


class _SchedulerLauncher(_Launcher):
    def __init__(self) -> None:
        self.aborted = 0

    @property
    def isolated(self) -> bool:
        return True

    def abort_start(self) -> None:
        self.aborted += 1

    async def status(self) -> dict[str, Any]:
        return {"job_id": "7", "nodes": ["n1"], "state": "RUNNING"}


def test_engine_uses_a_capability_when_declared() -> None:
    launcher = _SchedulerLauncher()
    cluster = AsyncCluster(workers=1, launcher=launcher)
    assert cluster.network_isolated is True
    assert asyncio.run(cluster.scheduler_status()) == {"job_id": "7", "nodes": ["n1"], "state": "RUNNING"}
    asyncio.run(cluster.kill())
    assert launcher.aborted == 1


def test_engine_does_without_a_capability() -> None:
    cluster = AsyncCluster(workers=1, launcher=_Launcher())
    assert cluster.network_isolated is False
    assert asyncio.run(cluster.scheduler_status()) is None
    asyncio.run(cluster.kill())  # nothing to abort: no AttributeError


def test_stacks_need_a_connection_file_or_an_agent() -> None:
    class Worker:
        index = 0
        handle = _Handle()

    stacks = asyncio.run(_dump_one(Worker(), None))
    assert stacks.note == "this kind of worker cannot be asked for its stacks"
