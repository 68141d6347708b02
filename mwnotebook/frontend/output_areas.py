"""Each worker's output in its own labelled area of the cell, updated in place.

A plain kernel's output area is a terminal of sorts: ``\\r`` rewrites the current line (Keras
``verbose=1``, tqdm), ``clear_output(wait=True)`` empties it. With N workers writing into one cell
that breaks, so every worker gets one display of its own (created at its first output, so the cell
reads top to bottom in the order things happened) holding its screen: finished lines plus the live,
unfinished line, every line labelled ``[worker i]``. The display is updated in place
(``update_display_data``) at most :data:`UPDATES_PER_S` times a second per worker, so a saved
notebook holds each worker's final screen, not every frame.

Bounded: an area keeps the last :data:`MAX_LINES` lines and says how many earlier ones it left out
(all of them are in the cell's ``mw_result``). Rich output (figures, tables) is shown as it comes,
labelled; identical ``execute_result``\\ s of all workers (the ``History`` object of every worker's
``fit``) are shown once, labelled with every worker that returned it.
"""

from __future__ import annotations

import html
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mwnotebook.engine.relay import is_startup_chatter, render_line, show_startup_default, worker_label
from mwnotebook.shared.events import Event, WorkerOutput

#: Display updates per second and worker, at most.
UPDATES_PER_S = 10.0
#: Lines an area keeps (older ones are counted, not shown).
MAX_LINES = 500
_STDERR_STYLE = "background:#fdd"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

#: ``publish(bundle, display_id, update)``: show or replace one display.
PublishFn = Callable[[dict[str, Any], str, bool], None]
#: ``show(bundle, metadata, transient)``: show a worker's rich output.
ShowFn = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]


@dataclass
class WorkerScreen:
    """One worker's text as a terminal shows it (pure)."""

    max_lines: int = MAX_LINES
    show_startup: bool = False
    lines: deque = field(default_factory=deque)  # (stream, text)
    dropped: int = 0
    hidden: int = 0
    clear_pending: bool = False
    _partial: dict[str, str] = field(default_factory=dict)

    def write(self, stream: str, text: str) -> None:
        if self.clear_pending and text:
            self.clear()
        text = self._partial.pop(stream, "") + text.replace("\r\n", "\n")
        *complete, rest = text.split("\n")
        for line in complete:
            shown = render_line(line)
            if not self.show_startup and stream == "stderr" and is_startup_chatter(shown):
                self.hidden += 1
                continue
            self.lines.append((stream, shown))
        while len(self.lines) > self.max_lines:
            self.lines.popleft()
            self.dropped += 1
        if rest:
            cut = rest.rfind("\r")  # keep what is needed to go on rendering, not every frame
            self._partial[stream] = render_line(rest[:cut]) + rest[cut:] if cut > 0 else rest

    def clear(self) -> None:
        self.lines.clear()
        self._partial.clear()
        self.dropped = 0
        self.clear_pending = False

    def visible(self) -> list[tuple[str, str]]:
        """Every line to show, the live ones last."""
        live = [(s, render_line(t)) for s, t in self._partial.items()]
        return list(self.lines) + [(s, t) for s, t in live if t]

    def bundle(self, worker: int, where_all: str) -> dict[str, Any]:
        label = worker_label(worker)
        rows = self.visible()
        note = (f"... {self.dropped} earlier lines of worker {worker} not shown here "
                f"(all are in {where_all})") if self.dropped else ""
        plain = ([label + note] if note else []) + [label + text for _, text in rows]
        html_rows = [f"<span style='color:#666'>{html.escape(label + note)}</span>"] if note else []
        for stream, text in rows:
            body = f"<b>{html.escape(label)}</b>{html.escape(text)}"
            html_rows.append(f"<span style='{_STDERR_STYLE}'>{body}</span>" if stream == "stderr" else body)
        page = (f"<pre class='mw-worker-output' data-worker='{worker}' style='margin:0;white-space:pre-wrap'>"
                + "\n".join(html_rows) + "</pre>")
        return {"text/plain": "\n".join(plain), "text/html": page}


def _ipython_publish(bundle: dict[str, Any], display_id: str, update: bool) -> None:
    from IPython.display import publish_display_data

    publish_display_data(bundle, metadata={}, transient={"display_id": display_id}, update=update)


def _ipython_show(bundle: dict[str, Any], metadata: dict[str, Any], transient: dict[str, Any]) -> None:
    from IPython.display import publish_display_data

    update = bool(transient.pop("update", False))
    publish_display_data(bundle, metadata=metadata, transient=transient or None, update=update)


def _workers_label(workers: list[int], total: int) -> str:
    if len(workers) == total and total > 1:
        return f"[all {total} workers] "
    if len(workers) == 1:
        return worker_label(workers[0])
    return f"[workers {', '.join(map(str, workers))}] "


def _same_key(data: dict[str, Any]) -> str:
    """What makes two results 'the same': their data, memory addresses ignored."""
    normal = {k: _ADDRESS.sub(" at 0x...", v) if isinstance(v, str) else v for k, v in data.items()}
    return json.dumps(normal, sort_keys=True, default=str)


class WorkerOutputAreas:
    """An event sink drawing every worker's output in its own area of the current cell."""

    def __init__(self, num_workers: int, *, publish: PublishFn = _ipython_publish, show: ShowFn = _ipython_show,
                 show_startup: bool | None = None, max_lines: int = MAX_LINES,
                 updates_per_s: float = UPDATES_PER_S, where_all: str = "mw_result.stdout(i)",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.num_workers = num_workers
        self._publish = publish
        self._show = show
        self._show_startup = show_startup_default() if show_startup is None else show_startup
        self._max_lines = max_lines
        self._interval = 1.0 / updates_per_s
        self._where_all = where_all
        self._clock = clock
        self._lock = threading.RLock()
        self._screens: dict[int, WorkerScreen] = {}
        self._ids: dict[int, str] = {}
        self._last: dict[int, float] = {}
        self._timers: dict[int, threading.Timer] = {}
        self._results: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
        self._finished = False
        self._prefix = uuid.uuid4().hex[:12]
        #: Display updates sent per worker (for tests and the rate limit).
        self.updates: dict[int, int] = {}

    # -- the event sink ----------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        if not isinstance(event, WorkerOutput):
            return
        w, content = event.worker, event.content
        with self._lock:
            if event.msg_type == "stream":
                self._screen(w).write(content.get("name", "stdout"), content.get("text", ""))
                self._changed(w)
            elif event.msg_type == "clear_output":
                if w in self._screens:
                    if content.get("wait"):
                        self._screens[w].clear_pending = True
                    else:
                        self._screens[w].clear()
                        self._changed(w)
            elif event.msg_type == "execute_result":
                self._results.append((w, content.get("data", {}), content.get("metadata", {})))
            elif event.msg_type in ("display_data", "update_display_data"):
                self._show_rich(w, event.msg_type, content)

    def _screen(self, worker: int) -> WorkerScreen:
        screen = self._screens.get(worker)
        if screen is None:
            screen = self._screens[worker] = WorkerScreen(self._max_lines, self._show_startup)
        return screen

    def _changed(self, worker: int) -> None:
        if self._finished:
            return
        wait = self._interval - (self._clock() - self._last.get(worker, -1e9))
        if wait <= 0:
            self._render(worker)
        elif worker not in self._timers:
            timer = threading.Timer(wait, self._on_timer, args=(worker,))
            timer.daemon = True
            self._timers[worker] = timer
            timer.start()

    def _on_timer(self, worker: int) -> None:
        with self._lock:
            self._timers.pop(worker, None)
            if not self._finished:
                self._render(worker)

    def _render(self, worker: int) -> None:
        screen = self._screens.get(worker)
        if screen is None or (worker not in self._ids and not screen.visible() and not screen.dropped):
            return  # nothing to show yet (e.g. only start-up chatter): no empty area
        bundle = screen.bundle(worker, self._where_all.replace("(i)", f"({worker})"))
        update = worker in self._ids
        display_id = self._ids.setdefault(worker, f"mw-{self._prefix}-worker-{worker}")
        self._last[worker] = self._clock()
        self.updates[worker] = self.updates.get(worker, 0) + 1
        self._publish(bundle, display_id, update)

    def _show_rich(self, worker: int, msg_type: str, content: dict[str, Any]) -> None:
        transient = dict(content.get("transient") or {})
        if "display_id" in transient:  # the worker's own ids, kept apart from other workers'
            transient["display_id"] = f"mw-{self._prefix}-w{worker}-{transient['display_id']}"
        if msg_type == "update_display_data":
            if "display_id" not in transient:
                return
            transient["update"] = True
        data = dict(content.get("data", {}))
        if "text/plain" in data and msg_type == "display_data":
            data["text/plain"] = worker_label(worker) + data["text/plain"]
        self._show(data, content.get("metadata", {}), transient)

    # -- the end of the cell ---------------------------------------------------------------------
    def finish(self) -> None:
        """Final state of every area, then the cell's results (identical ones once)."""
        with self._lock:
            self._finished = True
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
            for worker in sorted(self._screens):
                self._render(worker)
            self._show_results()

    def _show_results(self) -> None:
        groups: dict[str, list[tuple[int, dict[str, Any], dict[str, Any]]]] = {}
        for item in sorted(self._results, key=lambda r: r[0]):
            groups.setdefault(_same_key(item[1]), []).append(item)
        self._results.clear()
        for members in groups.values():
            workers = [w for w, _, _ in members]
            _, data, metadata = members[0]
            data = dict(data)
            label = _workers_label(workers, self.num_workers)
            if "text/plain" in data:
                data["text/plain"] = label + data["text/plain"]
            if "text/html" in data:
                data["text/html"] = f"<b>{html.escape(label)}</b>" + data["text/html"]
            self._show(data, metadata, {})

    @property
    def hidden_startup_lines(self) -> int:
        return sum(s.hidden for s in self._screens.values())

    def text(self, worker: int) -> str:
        """A worker's area as plain text (what the display shows)."""
        with self._lock:
            screen = self._screens.get(worker)
            return "" if screen is None else screen.bundle(worker, self._where_all)["text/plain"]


