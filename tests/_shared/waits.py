"""Waiting for a condition in a test, written once: :func:`wait_for` (the value, or the test fails
naming what it waited for), :func:`wait_until` (whether it came), :func:`wait_for_async` (an async
check, for tests on the server's event loop).

Every timeout here is a hang bound, generous on a loaded machine, never a timing to assert: timings
go to benchmarks/. Waiting for processes to end is the test bed's :func:`testbed.processes.wait_gone`
(the test bed itself waits for them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``check`` until it is truthy: True if it became so within ``timeout`` s (its last answer
    is read after the bound, so a check that came true at the very end counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return bool(check())


def wait_for(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
             what: str = "the condition") -> T:
    """Poll ``check`` until it returns something truthy and return that; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


async def wait_for_async(check: Callable[[], Awaitable[T]], timeout: float = 30.0, interval: float = 0.1,
                         what: str = "the condition") -> T:
    """:func:`wait_for` for an async ``check``, awaited on the running loop."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)
