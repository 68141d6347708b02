"""The Slurm job the workers run in: an allocation made with ``salloc --no-shell`` (ours, cancelled
when released) or an existing one (attached, never cancelled by us), and the client commands
(``squeue``, ``scontrol``, ``scancel``) run against it, here or on a login node (``slurm_shell.py``).
Command lines and parsing: ``config/slurm_options.py``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from mwnotebook.config import slurm_options as cmd
from mwnotebook.config.slurm_nodes import parse_node_states, usable
from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.slurm.shell import SlurmProcess, SlurmShell
from mwnotebook.processes.shipped.slurm_tf_config import node_addresses

__all__ = ["SlurmAllocation", "StartAborted"]

log = logging.getLogger(__name__)

#: On a login node the reaper cancels the job after this long without a ping from the notebook.
REAPER_SILENCE_LIMIT = 30.0
REAPER_PING_SECONDS = 2.0


class StartAborted(ClusterStartError):
    """Ctrl-C while the job was pending: the request was withdrawn (the job cancelled)."""


class SlurmAllocation:
    """A Slurm job to run steps in: attached (not ours to cancel) or made with salloc (ours).
    ``shell`` says where the Slurm commands run (``slurm_shell.py``); ``abort`` set (Ctrl-C) ends a
    wait in the queue at once."""

    def __init__(self, job_id: str, owned: bool, shell: SlurmShell, abort: asyncio.Event | None = None) -> None:
        self.job_id = job_id
        self.owned = owned
        self.shell = shell
        self._abort = abort or asyncio.Event()
        self._reaper: SlurmProcess | None = None
        self._reaper_pings: asyncio.Future[None] | None = None
        self.nodes: list[str] = []
        self.addresses: dict[str, str] = {}
        self.state = "PENDING"

    @classmethod
    async def attach(cls, job_id: str, shell: SlurmShell, abort: asyncio.Event | None = None) -> SlurmAllocation:
        allocation = cls(cmd.check_job_id(job_id), owned=False, shell=shell, abort=abort)
        await allocation._wait_running(timeout=30.0)
        return allocation

    @classmethod
    async def request(cls, argv: Sequence[str], timeout: float, shell: SlurmShell,
                      abort: asyncio.Event | None = None) -> SlurmAllocation:
        """Run salloc; log the queue state while the job is pending; cancel on timeout, error or
        ``abort`` (Ctrl-C), which ends the wait at once."""
        abort = abort or asyncio.Event()
        log.info("requesting a Slurm allocation on %s: %s", shell.where, " ".join(argv))
        proc = await shell.spawn(argv)
        proc.close_stdin()
        job: str | None = None
        shown = ""
        errors: list[str] = []
        deadline = time.monotonic() + timeout
        aborted: asyncio.Future[Any] = asyncio.ensure_future(abort.wait())
        line_task: asyncio.Future[Any] | None = None
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ClusterStartError(
                        f"the Slurm job {job or '(not yet queued)'} was not granted within {timeout:.0f} s; "
                        "it was cancelled. Raise --timeout or ask for fewer resources")
                line_task = line_task or asyncio.ensure_future(proc.stderr.readline())
                await asyncio.wait({line_task, aborted}, timeout=min(remaining, 2.0),
                                   return_when=asyncio.FIRST_COMPLETED)
                if aborted.done():
                    log.warning("Ctrl-C while Slurm job %s was pending: the request is withdrawn (scancel)",
                                job or "(not yet queued)")
                    raise StartAborted(f"interrupted while Slurm job {job or '(not yet queued)'} was "
                                       "pending; it was cancelled")
                if not line_task.done():
                    if job:
                        shown = await cls._log_queue(shell, job, shown)
                    continue
                line, line_task = line_task.result(), None
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
                proc.terminate()  # salloc withdraws a pending request on SIGTERM (where it gets it)
            if job:
                await _cancel(shell, job)  # ends salloc too, also where sshd passes no signals
            else:  # queued, perhaps, but its id not read yet (a signal may not reach salloc over SSH)
                await _cancel_by_name(shell, argv)
            if proc.returncode is None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 10)
            if not job:
                await _cancel_by_name(shell, argv)  # queued while salloc was being stopped
            raise
        finally:
            aborted.cancel()
            if line_task is not None:
                line_task.cancel()
        if proc.returncode == 127:
            raise shell.not_found("salloc")
        if proc.returncode != 0 or not job:
            if job:
                await _cancel(shell, job)
            detail = "; ".join(errors[-3:]) or f"exit status {proc.returncode}"
            raise ClusterStartError(f"salloc failed: {detail}")
        allocation = cls(job, owned=True, shell=shell, abort=abort)
        try:
            await allocation._start_reaper()
            await allocation._wait_running(timeout=max(5.0, deadline - time.monotonic()))
        except BaseException:
            await allocation.release()
            raise
        return allocation

    @staticmethod
    async def _log_queue(shell: SlurmShell, job: str, shown: str) -> str:
        """Log the job's queue state when it changed; returns what is now shown."""
        with contextlib.suppress(ClusterStartError):
            state = cmd.parse_squeue(await shell.run(cmd.squeue_argv(job), 10))
            if state and state.describe() != shown:
                log.warning("Slurm job %s: %s; waiting", job, state.describe())
                return state.describe()
        return shown

    async def _wait_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        shown = ""
        while True:
            state = cmd.parse_squeue(await self.shell.run(cmd.squeue_argv(self.job_id), 10))
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
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._abort.wait(), 0.5)
            if self._abort.is_set():
                raise StartAborted(f"interrupted while Slurm job {self.job_id} was {shown}")
        self.nodes = cmd.parse_hostnames(await self.shell.run(cmd.hostnames_argv(state.nodelist)))
        self.addresses = node_addresses(await self.shell.run(cmd.node_info_argv(self.nodes)))
        log.info("Slurm job %s: nodes %s", self.job_id, self.nodes)

    async def usable_nodes(self) -> list[str] | None:
        """The job's nodes that can still run steps, in order (a node that failed in a ``--no-kill``
        job has left its node list; one DOWN or DRAINING is left out too); None when the job ended."""
        state = None
        with contextlib.suppress(ClusterStartError):
            state = cmd.parse_squeue(await self.shell.run(cmd.squeue_argv(self.job_id), 10))
        self.state = state.state if state else "ENDED"
        if state is None or not state.active or not state.nodelist:
            return None
        nodes = cmd.parse_hostnames(await self.shell.run(cmd.hostnames_argv(state.nodelist)))
        states = parse_node_states(await self.shell.run(cmd.node_info_argv(nodes)))
        return [node for node in nodes if usable(states.get(node, ""))]

    async def ended(self) -> bool:
        """True when the job can no longer run steps (cancelled, timed out, failed, forgotten)."""
        return await self.current_state() not in cmd.ACTIVE_STATES

    async def current_state(self) -> str:
        with contextlib.suppress(ClusterStartError):
            state = cmd.parse_squeue(await self.shell.run(cmd.squeue_argv(self.job_id), 10))
            self.state = state.state if state else "ENDED"
        return self.state

    async def _start_reaper(self) -> None:
        """A tiny process beside the Slurm commands that cancels the job when its stdin (from us)
        closes: the job is cancelled even when the notebook process is killed and cannot run
        ``release``. On a login node it also cancels after REAPER_SILENCE_LIMIT s without a ping
        (the SSH connection died silently); sshd closes its stdin when the connection drops."""
        limit = REAPER_SILENCE_LIMIT if self.shell.pings else None
        self._reaper = await self.shell.spawn(cmd.reaper_argv(self.job_id, limit))
        if limit:
            self._reaper_pings = asyncio.ensure_future(self._ping_reaper(self._reaper))

    @staticmethod
    async def _ping_reaper(reaper: SlurmProcess) -> None:
        while reaper.returncode is None:
            reaper.write(b"ping\n")
            await asyncio.sleep(REAPER_PING_SECONDS)

    async def release(self) -> None:
        if self.owned:
            self.owned = False
            await _cancel(self.shell, self.job_id)
            self.state = "CANCELLED"
        if self._reaper_pings is not None:
            self._reaper_pings.cancel()
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            reaper.close_stdin()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(reaper.wait(), 15)


async def _cancel_by_name(shell: SlurmShell, salloc: Sequence[str]) -> None:
    """Withdraw a request whose job id is not known, by its unique job name (config/slurm_options.py
    ``unique_job_name``); a shared name could belong to other notebooks' jobs, so none is cancelled."""
    name = cmd.job_name_of(salloc)
    if not name or name == "mwnotebook":
        return
    try:
        await shell.run(cmd.scancel_by_name_argv(name), 15)
        log.info("cancelled the Slurm request named %s", name)
    except ClusterStartError as exc:
        log.warning("could not cancel the Slurm request named %s: %s", name, exc)


async def _cancel(shell: SlurmShell, job: str) -> None:
    try:
        await shell.run(cmd.scancel_argv(job), 15)
        log.info("cancelled Slurm job %s", job)
    except ClusterStartError as exc:
        log.warning("could not cancel Slurm job %s: %s", job, exc)
