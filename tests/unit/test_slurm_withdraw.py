"""A Ctrl-C before salloc has printed its job id still withdraws the request
(mwnotebook/launchers/slurm/job.py ``SlurmAllocation.request``), by the request's unique job name.

Pure logic with a stand-in shell: salloc here never prints a line and ignores SIGTERM, as a
salloc on a login node does when sshd passes no signals. The real scenario (a real Slurm, Ctrl-C
while pending, here and through a login node) is tests/slurm/test_slurm_login.py
``test_ctrl_c_while_pending_cancels_the_job_at_once``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from mwnotebook.config import slurm_options as cmd
from mwnotebook.launchers.slurm.job import SlurmAllocation, StartAborted


class _SilentStream:
    async def readline(self) -> bytes:
        await asyncio.Event().wait()  # salloc has not printed its job id
        return b""


class _DeafSalloc:
    """A salloc that never prints and never hears a signal; it ends when its job is cancelled."""

    def __init__(self) -> None:
        self.stderr = _SilentStream()
        self.returncode: int | None = None
        self.ended = asyncio.Event()

    def close_stdin(self) -> None:
        pass

    def terminate(self) -> None:
        pass  # the signal does not reach it

    async def wait(self) -> int | None:
        await self.ended.wait()
        return self.returncode


class _Shell:
    where = "a login node"

    def __init__(self) -> None:
        self.salloc = _DeafSalloc()
        self.ran: list[list[str]] = []

    async def spawn(self, argv: Sequence[str]) -> Any:
        return self.salloc

    async def run(self, argv: Sequence[str], timeout: float = 30.0) -> str:
        self.ran.append(list(argv))
        if argv[:2] == ["scancel", f"--name={cmd.job_name_of(SALLOC)}"]:
            self.salloc.returncode = 1  # "Job allocation N has been revoked"
            self.salloc.ended.set()
        return ""


SALLOC = cmd.salloc_argv(["-N", "2"], 2, job_name=cmd.unique_job_name())


def test_each_request_gets_its_own_job_name() -> None:
    names = {cmd.job_name_of(cmd.salloc_argv([], 2, job_name=cmd.unique_job_name())) for _ in range(50)}
    assert len(names) == 50 and all(n and n.startswith("mwnotebook-") for n in names), names


def test_ctrl_c_before_the_job_id_withdraws_the_request_by_its_name() -> None:
    shell = _Shell()

    async def main() -> None:
        abort = asyncio.Event()
        asyncio.get_running_loop().call_later(0.1, abort.set)
        await asyncio.wait_for(SlurmAllocation.request(SALLOC, 60.0, shell, abort), 30)  # type: ignore[arg-type]

    with pytest.raises(StartAborted, match="not yet queued"):
        asyncio.run(main())
    assert ["scancel", f"--name={cmd.job_name_of(SALLOC)}"] in shell.ran, shell.ran
    assert shell.salloc.ended.is_set()


def test_a_shared_name_is_never_cancelled() -> None:
    shell = _Shell()
    shared = cmd.salloc_argv([], 2)  # the default name, which other notebooks' jobs may carry

    async def main() -> None:
        abort = asyncio.Event()
        asyncio.get_running_loop().call_later(0.1, abort.set)
        shell.salloc.ended.set()  # it ends by itself here
        await asyncio.wait_for(SlurmAllocation.request(shared, 60.0, shell, abort), 30)  # type: ignore[arg-type]

    with pytest.raises(StartAborted):
        asyncio.run(main())
    assert not [a for a in shell.ran if a[:1] == ["scancel"]], shell.ran
