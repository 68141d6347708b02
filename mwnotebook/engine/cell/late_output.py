"""Output a worker sends after its cell's run ended ("late output"), e.g. from a thread the cell started.

A plain ipykernel (7.x, measured) gives such output the parent header of the kernel's *latest*
request: while the kernel is idle that is the cell that started the thread, while another cell runs
it is that cell. The worker connection therefore sees late output as IOPub messages whose parent is
no longer running (the finished cell, or a silent request sent after it) and hands them here with
the *origin* the frontend set for that cell (:meth:`LateOutput.set_origin`). Output of a request
that is running (e.g. the thread prints while the next cell runs on the worker) is that request's
output, as in a plain kernel.

A frontend listens (:meth:`LateOutput.listen`) and shows each item labelled ``[worker i, after cell N]``.
Nothing is silently lost: every late stream text is also appended to the worker's output log; what
is shown is capped per worker and cell (:data:`LATE_CAP_CHARS`, then one note says it was cut), and
while nobody listens at most :data:`LATE_HELD_CHARS` characters are held (oldest dropped, counted).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mwnotebook.shared.events import METRICS_MIME, IOPubContent, OutputMsgType

log = logging.getLogger(__name__)

#: Late characters shown per worker and origin cell; beyond, output is cut (it stays in the log).
LATE_CAP_CHARS = 20_000
#: Late characters held in memory while no frontend listens (oldest dropped first).
LATE_HELD_CHARS = 100_000
#: Message types worth showing late (clear_output and execute_result cannot be placed after a cell).
_SHOWN = frozenset({"stream", "display_data", "update_display_data", "error"})


@dataclass(frozen=True)
class LateOrigin:
    """Which cell late output belongs to: ``label`` for people ("cell 3"), ``ref`` for the frontend."""

    label: str
    ref: Any = None


@dataclass(frozen=True)
class LateItem:
    """One late output message of ``worker``; ``cut_note`` when it stands for output that was cut."""

    worker: int
    msg_type: OutputMsgType
    content: IOPubContent
    origin: LateOrigin
    log_path: str = ""
    cut_note: bool = False


LateSink = Callable[[LateItem], None]


def _size(msg_type: str, content: IOPubContent) -> int:
    if msg_type == "stream":
        return len(content.get("text", ""))
    return len(str(content.get("data", {}).get("text/plain", ""))) + 1


class LateOutput:
    """Routes late output to a listening frontend, capped; holds it (bounded) while none listens.

    Thread-safe: items arrive on the cluster's event loop, frontends listen from any thread.
    """

    def __init__(self, cap_chars: int = LATE_CAP_CHARS, held_chars: int = LATE_HELD_CHARS) -> None:
        self.cap_chars = cap_chars
        self.held_chars = held_chars
        self.origin = LateOrigin("the last cell")
        self._sink: LateSink | None = None
        self._lock = threading.Lock()
        self._shown: dict[tuple[int, int], int] = {}  # (worker, id(origin)) -> characters passed on
        self._held: deque[tuple[LateItem, int]] = deque()
        self._held_size = 0
        #: Characters not shown per worker: over the cap, or dropped while held.
        self.cut: dict[int, int] = {}

    def set_origin(self, origin: LateOrigin) -> None:
        """The cell whose requests are sent from now on (late output of them is labelled with it)."""
        self.origin = origin

    def listen(self, sink: LateSink | None) -> list[LateItem]:
        """Make ``sink`` the receiver of late output (None: hold it); returns what was held."""
        with self._lock:
            self._sink = sink
            held = [item for item, _ in self._held]
            self._held.clear()
            self._held_size = 0
        return held

    def add(self, worker: int, msg: dict[str, Any], origin: LateOrigin, log_path: str = "") -> None:
        msg_type = msg.get("msg_type", "")
        content = msg.get("content", {})
        if msg_type not in _SHOWN or METRICS_MIME in content.get("data", {}):
            return
        size = _size(msg_type, content)
        key = (worker, id(origin))
        with self._lock:
            shown = self._shown.get(key, 0)
            if len(self._shown) > 256:  # old cells: forget their counts, keep memory bounded
                self._shown.clear()
            self._shown[key] = shown + size
            if shown >= self.cap_chars:
                self.cut[worker] = self.cut.get(worker, 0) + size
                return
            if shown + size > self.cap_chars and msg_type == "stream":  # only what fits under the cap
                content = {**content, "text": content.get("text", "")[:self.cap_chars - shown]}
            items = [LateItem(worker, msg_type, content, origin, log_path)]
            if shown + size > self.cap_chars:
                self.cut[worker] = self.cut.get(worker, 0) + (shown + size - self.cap_chars)
                note = (f"... late output cut here (more than {self.cap_chars} characters after {origin.label}); "
                        f"all of it is in {log_path or 'the worker log'}\n")
                items.append(LateItem(worker, "stream", {"name": "stderr", "text": note}, origin, log_path,
                                      cut_note=True))
            sink = self._sink
            if sink is None:
                for held in items:
                    self._hold(held)
                return
        for each in items:
            try:
                sink(each)
            except Exception:  # a broken frontend must not stop the worker's reader
                log.exception("showing late output of worker %d failed", worker)

    def _hold(self, item: LateItem) -> None:
        size = _size(item.msg_type, item.content)
        self._held.append((item, size))
        self._held_size += size
        while self._held_size > self.held_chars and self._held:
            dropped, dropped_size = self._held.popleft()
            self._held_size -= dropped_size
            self.cut[dropped.worker] = self.cut.get(dropped.worker, 0) + dropped_size
