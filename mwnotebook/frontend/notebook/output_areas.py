r"""Worker output in the cell as a plain kernel would show it, labelled ``[worker i]``.

* Finished lines are ordinary stream output (stdout / stderr), labelled, in arrival order, shown as
  a terminal shows them (a line redrawn with ``\r`` appears in its last state).
* A line a worker keeps redrawing (``\r`` or ``\b``: Keras ``verbose=1``, tqdm) gets a display of
  its own, updated in place at most :data:`UPDATES_PER_S` times a second: one live, labelled line
  per worker that advances while the epoch runs. When the line ends, the display keeps its final
  state, so a saved notebook holds one line per bar, not every frame.
* ``clear_output`` in a worker moves that worker's further output into one area of its own
  (a display, the last :data:`MAX_LINES` lines, saying how many it left out) that the worker's
  ``clear_output(wait=True)`` empties, without touching the other workers' output. When the cell's
  code calls ``clear_output`` (``areas_from_start``), every worker writes into its area from its
  first line, so a clear empties all it wrote, as a plain kernel clears a cell's output.
* Rich output (figures, tables) is shown as it comes, right after a small display naming its
  worker (:mod:`mwnotebook.frontend.notebook.rich_labels` says why a display of its own);
  identical rich outputs of several workers are shown once, the label naming all of them, and so
  are identical ``execute_result`` outputs (the ``History`` of every worker's ``fit``).
* TensorFlow's start-up chatter is left out (``--show-tf-startup`` shows it).
"""

from __future__ import annotations

import html
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from mwnotebook.frontend.notebook.rich_labels import RichOutputLabels, ShowFn
from mwnotebook.frontend.text.relay import (
    NO_NAMES,
    LineLabeller,
    Result,
    WorkerNames,
    grouped_results,
    is_startup_chatter,
    render_line,
    restart_line,
    worker_label,
)
from mwnotebook.shared.events import Event, IOPubContent, RunRestarted, WorkerOutput

#: Display updates per second and worker, at most.
UPDATES_PER_S = 10.0
#: Lines an area keeps (older ones are counted, not shown).
MAX_LINES = 500
#: Finished lines per worker and cell shown on the page; beyond, lines are counted and the cell says
#: so (a browser slows down with huge outputs; every line stays in the run's result).
MAX_PAGE_LINES = 10_000
_STDERR_STYLE = "background:#fdd"

#: ``publish(bundle, display_id, update)``: show or replace one display.
PublishFn = Callable[[dict[str, Any], str, bool], None]


@dataclass
class WorkerScreen:
    """One worker's text as a terminal shows it (pure)."""

    max_lines: int = MAX_LINES
    show_startup: bool = False
    lines: deque[tuple[str, str]] = field(default_factory=deque)  # (stream, text)
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

    def bundle(self, worker: int, where_all: str, names: WorkerNames = NO_NAMES) -> dict[str, Any]:
        label = worker_label(worker, names)
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


def worker_display_id(prefix: str, worker: int, display_id: str) -> str:
    """The notebook's display id for a display a worker made with its own ``display_id``: one
    scheme for the cell's output and its late output (``late_view.py``), so that a late
    ``update_display_data`` finds the display its cell made. ``prefix`` is the cell's
    (:attr:`WorkerOutputAreas.display_prefix`); the worker part keeps two workers' equal ids apart."""
    return f"mw-{prefix}-w{worker}-{display_id}"


def _ipython_publish(bundle: dict[str, Any], display_id: str, update: bool) -> None:
    from IPython.display import publish_display_data

    publish_display_data(bundle, metadata={}, transient={"display_id": display_id}, update=update)


def _ipython_show(bundle: dict[str, Any], metadata: dict[str, Any], transient: dict[str, Any]) -> None:
    from IPython.display import publish_display_data

    update = bool(transient.pop("update", False))
    publish_display_data(bundle, metadata=metadata, transient=transient or None, update=update)


class WorkerOutputAreas:
    """An event sink drawing worker output in the current cell (see the module docstring)."""

    def __init__(self, num_workers: int, *, publish: PublishFn = _ipython_publish, show: ShowFn = _ipython_show,
                 stdout: TextIO | None = None, stderr: TextIO | None = None,
                 show_startup: bool | None = None, max_lines: int = MAX_LINES,
                 max_page_lines: int = MAX_PAGE_LINES,
                 updates_per_s: float = UPDATES_PER_S, where_all: str = "mw_result.stdout(i)",
                 clock: Callable[[], float] = time.monotonic, areas_from_start: bool = False,
                 names: WorkerNames = NO_NAMES) -> None:
        self.num_workers = num_workers
        #: What kernels that are not plain replicas are called (``[evaluator]``; text/grouping.py).
        self.names = names
        self._areas_from_start = areas_from_start
        self._publish = publish
        self._show = show
        self._streams = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self._labeller = LineLabeller(show_startup, names)
        self._max_lines = max_lines
        self._max_page_lines = max_page_lines
        self._page_lines: dict[int, int] = {}
        self._unflushed: set[str] = set()
        #: Lines not shown on the page per worker (the page was thinned).
        self.thinned: dict[int, int] = {}
        self._interval = 1.0 / updates_per_s
        self._where_all = where_all
        self._clock = clock
        self._lock = threading.RLock()
        self._screens: dict[int, WorkerScreen] = {}  # workers that used clear_output
        self._ids: dict[Any, str] = {}  # (worker, stream) live line or worker area -> display id
        self._last: dict[Any, float] = {}
        self._timers: dict[Any, threading.Timer] = {}
        self._results: list[Result] = []
        self._finished = False
        self._prefix = uuid.uuid4().hex[:12]
        self._serial = 0
        self._rich = RichOutputLabels(num_workers, self._prefix, show, names)
        #: Display updates sent per live line / area (for tests and the rate limit).
        self.updates: dict[Any, int] = {}

    @property
    def display_prefix(self) -> str:
        """What this cell's display ids of worker displays start with (late updates reuse it)."""
        return self._prefix

    # -- the event sink ----------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        if isinstance(event, RunRestarted):  # between two attempts: their lines stay apart, in order
            with self._lock:
                for worker in sorted({w for w, _s in self._labeller.pending_keys()}):
                    self._end_live_lines(worker)
                self._write("stdout", restart_line(event))
                self._flush_streams()
            return
        if not isinstance(event, WorkerOutput):
            return
        w, content = event.worker, event.content
        with self._lock:
            if event.msg_type == "stream":
                self._on_stream(w, content.get("name", "stdout"), content.get("text", ""))
            elif event.msg_type == "clear_output":
                self._on_clear(w, bool(content.get("wait")))
            elif event.msg_type == "execute_result":
                self._results.append((w, content.get("data", {}), content.get("metadata", {})))
            elif event.msg_type in ("display_data", "update_display_data"):
                self._show_rich(w, event.msg_type, content)

    def _on_stream(self, worker: int, stream: str, text: str) -> None:
        screen = self._screens.get(worker)
        if screen is None and self._areas_from_start:
            screen = self._screens[worker] = WorkerScreen(self._max_lines, self._labeller.show_startup)
        if screen is not None:
            screen.write(stream, text)
            self._changed(worker)
            return
        key = (worker, stream)
        lines = self._labeller.feed_lines(worker, stream, text)
        if lines and key in self._ids:  # the live line ended: its display keeps the final state
            self._render_line(key, lines.pop(0))
            self._forget(key)
        lines = self._thin(worker, lines)
        if lines:
            self._write(stream, "".join(f"{line}\n" for line in lines))
        if self._labeller.rewrites(worker, stream):
            self._changed(key)

    def _thin(self, worker: int, lines: list[str]) -> list[str]:
        """At most ``max_page_lines`` finished lines per worker on the page; a note when thinning starts."""
        shown = self._page_lines.get(worker, 0)
        room = max(0, self._max_page_lines - shown)
        if len(lines) <= room:
            self._page_lines[worker] = shown + len(lines)
            return lines
        self._page_lines[worker] = self._max_page_lines
        kept = lines[:room]
        if worker not in self.thinned:
            kept.append(f"{self._labeller.label(worker)}... more output than a page shows well: further lines are not "
                        f"shown here; all are in {self._where(worker)}")
        self.thinned[worker] = self.thinned.get(worker, 0) + len(lines) - room
        return kept

    def _where(self, worker: int) -> str:
        return self._where_all.replace("(i)", f"({worker})")

    def _on_clear(self, worker: int, wait: bool) -> None:
        screen = self._screens.get(worker)
        if screen is None:  # from now on this worker writes into an area of its own
            self._end_live_lines(worker)
            screen = self._screens[worker] = WorkerScreen(self._max_lines, self._labeller.show_startup)
        if wait:
            screen.clear_pending = True
        else:
            screen.clear()
            self._changed(worker)

    def _end_live_lines(self, worker: int) -> None:
        for key in [k for k in self._labeller.pending_keys() if k[0] == worker]:
            line = self._labeller.take_partial(*key)
            if key in self._ids:
                self._render_line(key, self._labeller.label(worker) + line)
                self._forget(key)
            elif line:
                self._write(key[1], f"{self._labeller.label(worker)}{line}\n")

    def _write(self, stream: str, text: str) -> None:
        """Stream text, left to the kernel's own batching (a flood is not one message per line)."""
        name = stream if stream in self._streams else "stdout"
        self._streams[name].write(text)
        self._unflushed.add(name)

    def _flush_streams(self) -> None:
        """Before any display: what was written before it must appear before it. (Only streams
        written to: a kernel's flush waits for its I/O thread, which a no-op cell should not pay.)"""
        for name in sorted(self._unflushed):
            self._streams[name].flush()
        self._unflushed.clear()

    # -- throttled display updates -----------------------------------------------------------
    def _changed(self, key: Any) -> None:
        if self._finished:
            return
        wait = self._interval - (self._clock() - self._last.get(key, -1e9))
        if wait <= 0:
            self._render(key)
        elif key not in self._timers:
            timer = threading.Timer(wait, self._on_timer, args=(key,))
            timer.daemon = True
            self._timers[key] = timer
            timer.start()

    def _on_timer(self, key: Any) -> None:
        with self._lock:
            self._timers.pop(key, None)
            if not self._finished:
                self._render(key)

    def _render(self, key: Any) -> None:
        if isinstance(key, tuple):  # a live line
            worker, stream = key
            if key not in self._labeller.pending_keys():
                return
            self._render_line(key, self._labeller.label(worker) + self._labeller.partial(worker, stream))
            return
        screen = self._screens.get(key)
        if screen is None or (key not in self._ids and not screen.visible() and not screen.dropped):
            return  # nothing to show yet: no empty area
        self._send(key, screen.bundle(key, self._where(key), self.names))

    def _render_line(self, key: tuple[int, str], line: str) -> None:
        worker, stream = key
        label = self._labeller.label(worker)
        body = f"<b>{html.escape(line[:len(label)])}</b>{html.escape(line[len(label):])}"
        if stream == "stderr":
            body = f"<span style='{_STDERR_STYLE}'>{body}</span>"
        self._send(key, {"text/plain": line, "text/html": (
            f"<pre class='mw-worker-output mw-live-line' data-worker='{worker}' "
            f"style='margin:0;white-space:pre-wrap'>{body}</pre>")})

    def _send(self, key: Any, bundle: dict[str, Any]) -> None:
        self._flush_streams()
        update = key in self._ids
        if not update:
            self._serial += 1
            self._ids[key] = f"mw-{self._prefix}-{self._serial}"
        self._last[key] = self._clock()
        self.updates[key] = self.updates.get(key, 0) + 1
        self._publish(bundle, self._ids[key], update)

    def _forget(self, key: Any) -> None:
        """A live line ended: the next one gets a display of its own, below what came since."""
        self._ids.pop(key, None)
        self._last.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _show_rich(self, worker: int, msg_type: str, content: IOPubContent) -> None:
        transient = dict(content.get("transient") or {})
        if "display_id" in transient:  # the worker's own ids, kept apart from other workers'
            transient["display_id"] = worker_display_id(self._prefix, worker, transient["display_id"])
        data, metadata = dict(content.get("data", {})), content.get("metadata", {})
        self._flush_streams()
        if msg_type == "display_data":
            self._rich.display(worker, data, metadata, transient)
        elif "display_id" in transient:
            self._rich.update(worker, data, metadata, transient)

    # -- the end of the cell ---------------------------------------------------------------------
    def finish(self) -> None:
        """Final state of every live line and area, then the cell's results (identical ones once)."""
        with self._lock:
            self._finished = True
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
            for worker, _stream in sorted(self._labeller.pending_keys()):
                self._end_live_lines(worker)
            for worker in sorted(self._screens):
                self._render(worker)
            for worker, count in sorted(self.thinned.items()):
                self._write("stdout", f"{self._labeller.label(worker)}... {count} lines not shown here (all are in "
                                      f"{self._where(worker)})\n")
            self._flush_streams()
            self._show_results()

    def _show_results(self) -> None:
        results, self._results = self._results, []
        self._rich.results(grouped_results(results, self.num_workers, self.names))

    @property
    def hidden_startup_lines(self) -> int:
        return sum(self._labeller.hidden.values()) + sum(s.hidden for s in self._screens.values())
