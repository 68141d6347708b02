"""The SSH host link's own decisions (mwnotebook/launchers/ssh/host_link.py), with fake connections:
which connection takes the next session (MaxSessions fall-over), when a failed connection is tried
again (the reconnect window), a loss that is final, and what ``lost()`` says. The real sshd is met in
tests/remote (the SSH launcher), tests/slurm (the login node) and tests/ray/test_ray_ssh.py."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import asyncssh
import pytest

from mwnotebook.config.hosts import parse_host
from mwnotebook.errors import ClusterStartError
from mwnotebook.launchers.ssh.connect import SSHConnectError, SSHConnection
from mwnotebook.launchers.ssh.host_link import HostLink, LinkSettings, fall_over, may_try_again


def test_the_newest_connection_with_room_takes_the_session() -> None:
    assert fall_over(["a", "b", "c"], set(), 4) == ("c", False)
    assert fall_over(["a", "b", "c"], {"c"}, 4) == ("b", False)
    assert fall_over([], set(), 4) == (None, False)  # none yet: open one


def test_every_connection_full_opens_another_until_the_limit_then_tries_them_again() -> None:
    assert fall_over(["a", "b"], {"a", "b"}, 3) == (None, False)
    assert fall_over(["a", "b", "c"], {"a", "b", "c"}, 3) == ("c", True)


def test_only_a_silent_host_is_tried_again_within_the_window() -> None:
    assert may_try_again(True, False, now=10.0, deadline=40.0)
    assert not may_try_again(False, False, now=10.0, deadline=40.0)  # refused by SSH itself: at once
    assert not may_try_again(True, True, now=10.0, deadline=40.0)  # the link is closing
    assert not may_try_again(True, False, now=41.0, deadline=40.0)  # the window has passed
    assert not may_try_again(True, False, now=10.1, deadline=10.0)  # a new host: no window


class _Conn:
    """A connection that refuses sessions after ``room`` of them (sshd's MaxSessions)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.closed = False

    def is_closed(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    async def wait_closed(self) -> None:
        return None

    async def start(self) -> str:
        if self.room <= 0:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "open failed")
        self.room -= 1
        return "session"


class _Opener:
    """Makes connections; the first ``failures`` attempts fail (transient: the host did not answer)."""

    def __init__(self, room: int = 2, failures: int = 0, transient: bool = True) -> None:
        self.room, self.failures, self.transient = room, failures, transient
        self.made: list[_Conn] = []
        self.calls = 0

    async def __call__(self) -> SSHConnection:
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            raise SSHConnectError("no SSH answer within 1 s from h:22", transient=self.transient)
        conn = _Conn(self.room)
        self.made.append(conn)
        return SSHConnection(cast(Any, conn), cast(Any, type("T", (), {"source": "test"})()))


def _link(opener: _Opener, **kwargs: Any) -> HostLink:
    return HostLink(parse_host("alice@h"), LinkSettings(connect_timeout=1.0), opener=opener, **kwargs)


async def _session(link: HostLink) -> Any:
    return await link.session(lambda conn: cast(Any, conn).start())


def test_a_refused_session_falls_over_to_a_new_connection() -> None:
    async def scenario() -> None:
        opener = _Opener(room=2)
        link = _link(opener)
        conns = [(await _session(link))[0] for _ in range(5)]
        assert opener.calls == 3 and link.connections == 3
        assert conns[:2] == [opener.made[0]] * 2 and conns[2:4] == [opener.made[1]] * 2
        await link.close()
        assert link.connections == 0 and all(c.closed for c in opener.made)

    asyncio.run(scenario())


def test_the_limit_of_full_connections_ends_in_an_error_naming_the_refusal() -> None:
    async def scenario() -> None:
        link = _link(_Opener(room=0), max_connections=2, name="--slurm-login h")
        with pytest.raises(ClusterStartError, match="^--slurm-login h: the SSH server refused more sessions"):
            await _session(link)

    asyncio.run(scenario())


def test_a_new_host_that_does_not_answer_fails_at_once() -> None:
    async def scenario() -> None:
        opener = _Opener(failures=1)
        link = _link(opener, reconnect_window=30.0)
        with pytest.raises(ClusterStartError, match="^alice@h: no SSH answer"):
            await link.connection()
        assert opener.calls == 1

    asyncio.run(scenario())


def test_a_host_reached_before_is_tried_again_within_the_window() -> None:
    async def scenario() -> None:
        opener = _Opener()
        link = _link(opener, reconnect_window=30.0)
        first = await link.connection()
        cast(Any, first).close()  # its network failed
        opener.failures = 1
        second = await link.connection()
        assert second is not first and opener.calls == 3
        assert link.lost() == "the SSH connection closed"  # remembered after the lost one was dropped
        # without a window: the same silence is final
        refused = _Opener()
        plain = _link(refused)
        cast(Any, await plain.connection()).close()
        refused.failures = 1
        with pytest.raises(ClusterStartError, match="no SSH answer"):
            await plain.connection()

    asyncio.run(scenario())


def test_a_final_loss_is_said_by_every_later_use_and_lost_is_quiet_after_close() -> None:
    async def scenario() -> None:
        opener = _Opener()
        link = _link(opener, loss_is_final=True, name="--ray-ssh h")
        conn = await link.connection()
        assert link.lost() == "" and link.lost(conn) == ""
        link.check()
        cast(Any, conn).close()
        assert link.lost() == "the SSH connection closed"
        with pytest.raises(ClusterStartError, match="^--ray-ssh h: the SSH connection was lost"):
            link.check()
        with pytest.raises(ClusterStartError, match="the workers with it"):
            await link.connection()
        assert opener.calls == 1  # never replaced
        await link.close()
        assert link.lost() == ""
        with pytest.raises(ClusterStartError, match="the cluster is stopping"):
            await link.connection()

    asyncio.run(scenario())
