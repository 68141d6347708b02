"""Where a cluster's start stands: the start under way, the restart begun in the background after a
failed cell, and whether a start has completed since the launcher was made.

:class:`~mwnotebook.engine.async_cluster.AsyncCluster` holds one :class:`StartState` and says what a
start does; this decides only when one begins, who waits for it and what a failed background
restart leaves behind (nothing: the next start begins afresh, not with that restart's error).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class StartState:
    """The start under way (at most one), the background restart and whether the cluster lived.

    All methods run on the cluster's event loop.
    """

    def __init__(self) -> None:
        self._task: asyncio.Future[None] | None = None
        #: The restart begun after a failed cell (:meth:`begin_in_background`), while it is under way
        #: or failed unseen: if it fails, the next start begins afresh instead of raising its error.
        self._background: asyncio.Future[None] | None = None
        #: Whether a start has completed since the launcher was made: a later start finding no
        #: workers (a restart that failed, a kill) begins afresh with a new launcher.
        self.lived = False

    @property
    def under_way(self) -> bool:
        """Whether a start or a background restart is running now."""
        return self._task is not None

    async def join(self, start: Callable[[], Awaitable[None]]) -> None:
        """Wait for the start under way, or begin ``start()`` when none is (so two callers that
        arrive together share one start). A failed background restart is logged and forgotten
        first; the caller checks again whether it still needs a start after :meth:`after_background`."""
        if self._task is None:
            self._task = self._begin(start())
        await asyncio.shield(self._task)

    async def after_background(self) -> None:
        """Wait for a background restart still under way (or failed unseen); its failure is logged,
        not raised: the caller starts afresh instead."""
        restart, self._background = self._background, None
        if restart is None:
            return
        try:
            await asyncio.shield(restart)
        except Exception as exc:  # no dead end: the next cell starts afresh
            log.warning("the restart after the last failed cell did not bring the workers back (%s); "
                        "starting a fresh cluster", exc)
        if self._task is restart:
            self._task = None

    def begin_in_background(self, start: Awaitable[None]) -> None:
        """Begin a restart nobody waits for now (after a failed cell); the next start waits for it."""
        self._task = self._background = self._begin(start)

    async def settle(self) -> None:
        """Before a stop or a kill: wait for the start under way, whatever its end (so no worker it
        makes is missed), then forget the background restart and the life (the next start is fresh)."""
        if self._task is not None:
            await asyncio.gather(asyncio.shield(self._task), return_exceptions=True)
        self._background = None
        self.lived = False

    def _begin(self, start: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(start)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Future[None]) -> None:
        if self._task is task:
            self._task = None
        if not task.cancelled():
            task.exception()  # retrieved here so a failed background start is not logged as lost
