"""The Slurm job the workers run in: an allocation made with ``salloc --no-shell`` (ours, cancelled
when released) or an existing one (attached, never cancelled by us), and the client commands
(``squeue``, ``scontrol``, ``scancel``) run against it. Command lines and parsing: ``config/slurm.py``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

from mwnotebook.config import slurm as cmd
from mwnotebook.config.slurm_tf_config import node_addresses
from mwnotebook.errors import ClusterStartError

__all__ = ["SlurmAllocation", "run_command"]

log = logging.getLogger(__name__)


async def run_command(argv: Sequence[str], timeout: float = 30.0) -> str:
    """A Slurm client command's stdout; ClusterStartError naming the command when it fails."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
    except FileNotFoundError:
        raise ClusterStartError(f"{argv[0]} was not found: --slurm needs the Slurm client commands "
                                "(salloc, srun, scontrol, squeue, scancel) on this machine") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise ClusterStartError(f"`{' '.join(argv)}` gave no answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise ClusterStartError(f"`{' '.join(argv)}` failed: {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


class SlurmAllocation:
    """A Slurm job to run steps in: attached (not ours to cancel) or made with salloc (ours)."""

    def __init__(self, job_id: str, owned: bool) -> None:
        self.job_id = job_id
        self.owned = owned
        self._reaper: asyncio.subprocess.Process | None = None
        self.nodes: list[str] = []
        self.addresses: dict[str, str] = {}
        self.state = "PENDING"

    @classmethod
    async def attach(cls, job_id: str) -> SlurmAllocation:
        allocation = cls(cmd.check_job_id(job_id), owned=False)
        await allocation._wait_running(timeout=30.0)
        return allocation

    @classmethod
    async def request(cls, argv: Sequence[str], timeout: float) -> SlurmAllocation:
        """Run salloc; log the queue state while the job is pending; cancel on timeout or error."""
        log.info("requesting a Slurm allocation: %s", " ".join(argv))
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            raise ClusterStartError("salloc was not found: --slurm needs the Slurm client commands on "
                                    "this machine (or run the notebook on a login node)") from None
        job: str | None = None
        shown = ""
        errors: list[str] = []
        deadline = time.monotonic() + timeout
        assert proc.stderr is not None
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ClusterStartError(
                        f"the Slurm job {job or '(not yet queued)'} was not granted within {timeout:.0f} s; "
                        "it was cancelled. Raise --timeout or ask for fewer resources")
                try:
                    line = await asyncio.wait_for(proc.stderr.readline(), min(remaining, 2.0))
                except asyncio.TimeoutError:
                    if job:
                        shown = await cls._log_queue(job, shown)
                    continue
                if not line:
                    break
                text = line.decode(errors="replace").strip()
                parsed = cmd.parse_salloc_line(text)
                if parsed:
                    job = parsed[1]
                    if parsed[0] == "pending":
                        log.warning("Slurm job %s is pending; waiting up to %.0f s (--timeout)", job, timeout)
                elif text:
                    errors.append(text)
            await proc.wait()
        except BaseException:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()  # salloc withdraws a pending request on SIGTERM
                await proc.wait()
            if job:
                await _cancel(job)
            raise
        if proc.returncode != 0 or not job:
            if job:
                await _cancel(job)
            detail = "; ".join(errors[-3:]) or f"exit status {proc.returncode}"
            raise ClusterStartError(f"salloc failed: {detail}")
        allocation = cls(job, owned=True)
        try:
            await allocation._start_reaper()
            await allocation._wait_running(timeout=max(5.0, deadline - time.monotonic()))
        except BaseException:
            await allocation.release()
            raise
        return allocation

    @staticmethod
    async def _log_queue(job: str, shown: str) -> str:
        """Log the job's queue state when it changed; returns what is now shown."""
        with contextlib.suppress(ClusterStartError):
            state = cmd.parse_squeue(await run_command(cmd.squeue_argv(job), 10))
            if state and state.describe() != shown:
                log.warning("Slurm job %s: %s; waiting", job, state.describe())
                return state.describe()
        return shown

    async def _wait_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        shown = ""
        while True:
            state = cmd.parse_squeue(await run_command(cmd.squeue_argv(self.job_id), 10))
            if state is None:
                raise ClusterStartError(f"Slurm job {self.job_id} is not in the queue (ended or cancelled?)")
            self.state = state.state
            if state.active and state.nodelist:
                break
            if not state.waiting:
                raise ClusterStartError(f"Slurm job {self.job_id} is {state.describe()}: cannot run workers in it")
            if state.describe() != shown:
                shown = state.describe()
                log.warning("Slurm job %s: %s; waiting", self.job_id, shown)
            if time.monotonic() > deadline:
                raise ClusterStartError(f"Slurm job {self.job_id} still {shown} after {timeout:.0f} s")
            await asyncio.sleep(0.5)
        self.nodes = cmd.parse_hostnames(await run_command(cmd.hostnames_argv(state.nodelist)))
        self.addresses = node_addresses(await run_command(cmd.node_info_argv(self.nodes)))
        log.info("Slurm job %s: nodes %s", self.job_id, self.nodes)

    async def ended(self) -> bool:
        """True when the job can no longer run steps (cancelled, timed out, failed, forgotten)."""
        return await self.current_state() not in cmd.ACTIVE_STATES

    async def current_state(self) -> str:
        with contextlib.suppress(ClusterStartError):
            state = cmd.parse_squeue(await run_command(cmd.squeue_argv(self.job_id), 10))
            self.state = state.state if state else "ENDED"
        return self.state

    async def _start_reaper(self) -> None:
        """A tiny process that cancels the job when its stdin (a pipe from us) closes: the job is
        cancelled even when the notebook process itself is killed and cannot run ``release``."""
        self._reaper = await asyncio.create_subprocess_exec(
            "sh", "-c", 'read _ || true; exec "$@" >/dev/null 2>&1', "mwnotebook-slurm-reaper",
            *cmd.scancel_argv(self.job_id), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)

    async def release(self) -> None:
        if self.owned:
            self.owned = False
            await _cancel(self.job_id)
            self.state = "CANCELLED"
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            with contextlib.suppress(Exception):
                assert reaper.stdin is not None
                reaper.stdin.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(reaper.wait(), 15)


async def _cancel(job: str) -> None:
    try:
        await run_command(cmd.scancel_argv(job), 15)
        log.info("cancelled Slurm job %s", job)
    except ClusterStartError as exc:
        log.warning("could not cancel Slurm job %s: %s", job, exc)
