"""engine/start_state.py: one start shared by its callers, a failed background restart forgotten
(the next start begins afresh), a stop waiting for the start under way. Pure asyncio, no kernels;
the real starts and restarts are tests/integration/test_no_dead_ends.py and
tests/reliability/test_cluster_faults.py."""

from __future__ import annotations

import asyncio
import logging

import pytest

from mwnotebook.engine.start_state import StartState


def test_callers_that_arrive_together_share_one_start() -> None:
    starts: list[int] = []

    async def start() -> None:
        starts.append(1)
        await asyncio.sleep(0.01)

    async def main() -> None:
        state = StartState()
        await asyncio.gather(state.join(start), state.join(start), state.join(start))
        assert starts == [1]
        assert not state.under_way
        await state.join(start)  # a start after the last one ended is a new one
        assert starts == [1, 1]

    asyncio.run(main())


def test_a_failed_background_restart_is_logged_and_the_next_start_begins_afresh(
        caplog: pytest.LogCaptureFixture) -> None:
    began: list[str] = []

    async def failing_restart() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("no host")

    async def start() -> None:
        began.append("fresh")

    async def main() -> None:
        state = StartState()
        state.begin_in_background(failing_restart())
        assert state.under_way
        with caplog.at_level(logging.WARNING, "mwnotebook.engine.start_state"):
            await state.after_background()  # not raised
        assert "did not bring the workers back (no host)" in caplog.text
        assert not state.under_way
        await state.join(start)
        assert began == ["fresh"]
        await state.after_background()  # forgotten once seen

    asyncio.run(main())


def test_settle_waits_for_the_start_under_way_and_forgets_the_life() -> None:
    done: list[bool] = []

    async def slow_start() -> None:
        await asyncio.sleep(0.02)
        done.append(True)
        raise RuntimeError("a start that failed is not the stop's error")

    async def main() -> None:
        state = StartState()
        state.lived = True
        state.begin_in_background(slow_start())
        await state.settle()
        assert done == [True]
        assert not state.lived and not state.under_way

    asyncio.run(main())
