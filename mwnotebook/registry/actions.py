"""The clusters panel's actions as the owning kernel carries them out: ``interrupt``, ``restart``, ``stop``.

The control socket (registry/control.py) hands each accepted action here; it runs on a thread of
its own, so a kernel busy with a cell still obeys. One ``restart`` or ``stop`` at a time (another
one is refused ``busy``); an interrupt is always taken. A stop or restart first interrupts a running
cell and waits up to ``cell_end_wait`` seconds for it to end. What the panel sees of it (the phase,
an error line) is told to the publication through :class:`ActionView`.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from mwnotebook.registry.control import Refusal

log = logging.getLogger(__name__)

#: How long a stop or restart from the panel waits for a running cell to end after interrupting it.
CELL_END_WAIT = 20.0


class Controllable(Protocol):
    """What the actions need of the cluster (the blocking facade's thread-safe methods)."""

    def interrupt(self) -> None: ...
    def restart(self) -> object: ...
    def stop(self) -> None: ...


class ActionView(Protocol):
    """What the actions tell the published document (registry/publication.py implements it)."""

    def action_begins(self, action: str) -> bool:
        """A restart or stop begins; True when a cell is running."""
        ...

    def wait_cell_end(self, timeout: float) -> None:
        """Until the running cell ended (or ``timeout`` seconds)."""
        ...

    def action_failed(self, action: str, error: BaseException) -> None: ...


class PanelActions:
    """Carries out the panel's actions on ``cluster``; ``view`` shows their course."""

    def __init__(self, cluster: Controllable, view: ActionView, cell_end_wait: float = CELL_END_WAIT) -> None:
        self._cluster = cluster
        self._view = view
        self._cell_end_wait = cell_end_wait
        self._lock = threading.Lock()
        self._action: str | None = None

    def accept(self, action: str) -> Refusal | None:
        """Take ``action`` (it runs on its own thread) or say why not; returns at once."""
        with self._lock:
            if self._action is not None and action != "interrupt":
                return Refusal("busy", f"a {self._action} from the panel is under way")
            if action != "interrupt":
                self._action = action
        threading.Thread(target=self._do, args=(action,), name=f"mwnotebook-{action}", daemon=True).start()
        return None

    def _do(self, action: str) -> None:
        try:
            if action == "interrupt":
                self._cluster.interrupt()
                return
            if self._view.action_begins(action):
                self._cluster.interrupt()
                self._view.wait_cell_end(self._cell_end_wait)
            if action == "restart":
                self._cluster.restart()
            else:
                self._cluster.stop()
        except Exception as e:
            log.warning("%s from the clusters panel failed", action, exc_info=True)
            self._view.action_failed(action, e)
        finally:
            if action != "interrupt":
                with self._lock:
                    self._action = None
