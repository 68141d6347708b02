"""One background event loop per process, on which every cluster's async core runs.

Notebook cells are synchronous and IPython's own loop (if any) must not be blocked or re-entered,
so the sync facade hands coroutines to this thread and waits for their futures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from mwnotebook.shared.process_wide import ProcessWide

T = TypeVar("T")


class BackgroundLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="mwnotebook-loop", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for it; Ctrl-C cancels it and re-raises."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except KeyboardInterrupt:
            future.cancel()
            raise


_LOOP = ProcessWide(BackgroundLoop)


def background_loop() -> BackgroundLoop:
    """The notebook process's background loop (started on first use)."""
    return _LOOP.get()
