"""What every remote agent run does (mwnotebook/launchers/remote/agent_channel.py ``AgentRun``),
with a fake transport: the SSH channel and the Slurm job step only supply reading and writing
(their real runs: tests/remote/, tests/slurm/)."""

from __future__ import annotations

import asyncio
import json

import pytest

from mwnotebook.launchers.remote import agent_channel
from mwnotebook.launchers.remote.agent_channel import AgentRun
from mwnotebook.launchers.slurm.agent import SrunAgent
from mwnotebook.launchers.ssh.agent import SSHAgent


class FakeRun(AgentRun):
    def __init__(self, lines: list[str], stderr: list[str]) -> None:
        self.written: list[str] = []
        self.lines = lines
        self.stderr = stderr
        self.ended = False
        super().__init__("node7")

    def _write(self, text: str) -> None:
        self.written.append(text)

    async def _readline(self) -> str:
        return self.lines.pop(0) if self.lines else ""

    async def _read_stderr(self) -> str:
        return self.stderr.pop(0) if self.stderr else ""

    def _running(self) -> bool:
        return not self.ended

    async def _wait(self) -> None:
        pass

    def _ended_reason(self, python: str, stderr: str) -> str:
        return f"{python}: {stderr}"

    async def close(self) -> None:
        self._stop_pinging()
        self.ended = True


def test_a_run_sends_source_config_and_reads_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_channel, "AGENT_PING_SECONDS", 0.01)

    async def scenario() -> None:
        run = FakeRun(["banner from a login script\n", json.dumps({"event": "ready", "pid": 5}) + "\n"],
                      ["Traceback\n", "boom"])
        run._send_source(ping=True)
        run.configure({"role": "kernel"})
        assert await run.next_event() == {"event": "ready", "pid": 5}
        assert await run.next_event() is None
        await asyncio.sleep(0.1)
        await run.close()
        source = run.written[0]
        length, _, body = source.partition("\n")
        assert int(length) == len(body) and "def main()" in body
        assert run.written[1:3] == [f"ping {agent_channel.AGENT_SILENCE_LIMIT:g}\n", '{"role": "kernel"}\n']
        assert "ping\n" in run.written[3:]  # kept fed while it ran
        assert await run.why_it_ended("/py") == "/py: Traceback\nboom"

    asyncio.run(scenario())


def test_both_backends_are_agent_runs() -> None:
    assert issubclass(SSHAgent, AgentRun) and issubclass(SrunAgent, AgentRun)
    shared = {"configure", "send", "next_event", "why_it_ended", "_ping", "_drain_stderr", "_send_source"}
    for cls in (SSHAgent, SrunAgent):
        assert not shared & set(vars(cls)), f"{cls.__name__} redefines {shared & set(vars(cls))}"
