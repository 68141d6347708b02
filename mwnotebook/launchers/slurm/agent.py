"""The remote agent as a Slurm job step (``srun ... PYTHON -u -c BOOTSTRAP``, run here or in an SSH
session on the login node: ``launchers/slurm/shell.py``); what every agent run does is in
``launchers/remote/agent_channel.py``."""

from __future__ import annotations

import asyncio
import contextlib

from mwnotebook.config import slurm_options as cmd
from mwnotebook.launchers.remote.agent_channel import BOOTSTRAP, AgentRun
from mwnotebook.launchers.slurm.shell import SlurmProcess, SlurmShell

__all__ = ["SrunAgent"]


class SrunAgent(AgentRun):
    """One run of the remote agent as a Slurm job step (the srun process's stdin/stdout, here or in
    an SSH session on the login node)."""

    def __init__(self, process: SlurmProcess, node: str) -> None:
        self.process = process
        super().__init__(node)

    @classmethod
    async def start(cls, shell: SlurmShell, job_id: str, node: str, python: str,
                    gpus: int | None = None) -> SrunAgent:
        process = await shell.spawn(cmd.srun_argv(job_id, node, [python, "-u", "-c", BOOTSTRAP], gpus))
        agent = cls(process, node)
        # Over SSH the agent also stops when the notebook side falls silent (see ssh/agent.py).
        agent._send_source(ping=shell.pings)
        return agent

    def _write(self, text: str) -> None:
        self.process.write(text.encode())

    async def _readline(self) -> bytes:
        return await self.process.stdout.readline()

    async def _read_stderr(self) -> str:
        return (await self.process.stderr.read(4096)).decode(errors="replace")

    def _running(self) -> bool:
        return self.process.returncode is None

    async def _wait(self) -> None:
        await self.process.wait()

    def _ended_reason(self, python: str, stderr: str) -> str:
        lines = stderr.splitlines()
        if any("execve" in line for line in lines):
            return (f"Python interpreter {python!r} could not be started on the node; pass --python with "
                    "the path of the nodes' interpreter that has ipykernel and tensorflow")
        errors = [line for line in lines if "error" in line] or lines
        detail = f": {errors[0].strip()}" if errors else ""
        return f"the job step ended (exit status {self.process.returncode}){detail}"

    async def close(self) -> None:
        """stdin EOF (the agent kills its kernel and exits, ending the step); then by force."""
        self._stop_pinging()
        self.process.close_stdin()
        try:
            await asyncio.wait_for(self.process.wait(), 5)
        except asyncio.TimeoutError:
            self.process.terminate()  # srun cancels its step
            try:
                await asyncio.wait_for(self.process.wait(), 5)
            except asyncio.TimeoutError:
                self.process.kill()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.process.wait(), 5)
        self._stderr_task.cancel()
