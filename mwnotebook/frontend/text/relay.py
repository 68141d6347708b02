"""Pure routing of worker IOPub messages: into events, and into labelled text for a reader.

No I/O happens here except through the writers handed in, so tests feed fake messages.

Two details make worker output read as it does in a plain kernel:

* ``\\r``-updated lines (Keras ``verbose=1``, tqdm) are rendered as a terminal would: a finished
  line is its last visible state (:func:`render_line`), not every frame; on a terminal the live,
  unfinished line of the last active worker is redrawn in place (at most :data:`LIVE_UPDATES_PER_S`
  times a second), labelled.
* TensorFlow's start-up chatter (:func:`is_startup_chatter`) is left out of what is shown (it is
  still in the run's result); ``MWNOTEBOOK_SHOW_TF_STARTUP=1`` or ``--show-tf-startup`` shows it.
* Identical ``execute_result`` outputs of all workers are shown once at the end of the run
  (``grouped_results`` in ``grouping.py`` beside this file); output sent after a run ended is
  labelled ``[worker i, after cell N]`` (:func:`late_lines`, see :mod:`mwnotebook.engine.cell.late_output`).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any, TextIO

from mwnotebook.frontend.text.grouping import (
    NO_NAMES,
    DisplayGroups,
    Result,
    WorkerNames,
    grouped_results,
    with_plain_label,
    worker_label,
    workers_label,
)
from mwnotebook.shared.events import Event, IOPubContent, RunRestarted, WorkerOutput

__all__ = ["NO_NAMES", "LineLabeller", "Result", "TextRelay", "WorkerNames", "grouped_results",
           "is_startup_chatter", "late_label", "late_lines", "render_line", "restart_line", "show_startup_default",
           "worker_label", "workers_label"]

DisplayFn = Callable[[dict[str, Any], dict[str, Any]], None]

#: How often a terminal's live line is redrawn at most.
LIVE_UPDATES_PER_S = 10.0

#: Lines TensorFlow prints to stderr while it loads: absl's pre-init notice, and glog lines of the
#: files that report CPU features, oneDNN and the (absent) CUDA driver. A user's own output never
#: has this form; other TensorFlow messages (warnings during a cell) are shown.
_STARTUP_FILES = ("cudart_stub", "cpu_feature_guard", "port", "cuda_platform", "cuda_executor", "cuda_dnn",
                  "cuda_fft", "cuda_blas", "cuda_diagnostics", "gpu_device")
_STARTUP_CHATTER = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\."
    r"|[IWE]\d{4} [\d:.]+\s+\d+ (?:" + "|".join(_STARTUP_FILES) + r")\.cc:\d+\] .*"
    r"|\d{4}-\d\d-\d\d [\d:.]+: [IWE] \S*?(?:" + "|".join(_STARTUP_FILES) + r")\.cc:\d+\] .*)$")


def is_startup_chatter(line: str) -> bool:
    """Whether ``line`` is one of TensorFlow's start-up notices (see :data:`_STARTUP_CHATTER`)."""
    return bool(_STARTUP_CHATTER.match(line.rstrip("\r\n")))


def show_startup_default() -> bool:
    return os.environ.get("MWNOTEBOOK_SHOW_TF_STARTUP", "").strip().lower() in ("1", "true", "yes")


def restart_line(event: RunRestarted) -> str:
    """The line a restart (``--max-restarts``) leaves between two attempts' output (and one more
    for each place workers moved to, when they did not come back in place)."""
    return "".join(f"[mwnotebook] {line}\n" for line in (event.summary(), *event.moved))


def late_label(worker: int, origin: str) -> str:
    """The label of output ``worker`` sent after ``origin`` ("cell 3", "the script") had ended."""
    return f"[worker {worker}, after {origin}] "


def late_lines(worker: int, origin: str, text: str) -> str:
    """``text`` a worker sent late, each line labelled and shown as a terminal shows it."""
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    label = late_label(worker, origin)
    return "".join(f"{label}{render_line(line)}\n" for line in lines)


_CONTROL = re.compile(r"(\r|\x08)")


def render_line(text: str) -> str:
    """What a terminal shows for one line written with ``\\r`` (back to column 0) and ``\\b``.

    Characters overwrite from the cursor on, as in a terminal: ``"abc\\rX"`` shows ``"Xbc"``.
    """
    if "\r" not in text and "\x08" not in text:
        return text
    cells: list[str] = []
    pos = 0
    for piece in _CONTROL.split(text):
        if piece == "\r":
            pos = 0
        elif piece == "\x08":
            pos = max(0, pos - 1)
        elif piece:
            end = pos + len(piece)
            if end > len(cells):
                cells.extend(" " * (end - len(cells)))
            cells[pos:end] = piece
            pos = end
    return "".join(cells).rstrip()


class LineLabeller:
    """Prefixes every line of each worker's stdout/stderr with ``[worker i]`` (or the name ``names``
    gives that kernel: ``[evaluator]``, ``[coordinator]``).

    Streams arrive in arbitrary chunks; a partial line is held back until its newline arrives or
    :meth:`flush` is called, so a label never lands in the middle of another worker's line. A
    finished line is shown as a terminal would show it (:func:`render_line`); TensorFlow's start-up
    chatter is dropped unless ``show_startup``.
    """

    def __init__(self, show_startup: bool | None = None, names: WorkerNames = NO_NAMES) -> None:
        self.names = names
        self._pending: dict[tuple[int, str], str] = {}
        self.show_startup = show_startup_default() if show_startup is None else show_startup
        #: Start-up lines left out, per worker.
        self.hidden: dict[int, int] = {}

    def feed(self, worker: int, stream: str, text: str) -> str:
        return "".join(f"{line}\n" for line in self.feed_lines(worker, stream, text))

    def feed_lines(self, worker: int, stream: str, text: str) -> list[str]:
        """The labelled lines ``text`` finishes (without their newlines); start-up chatter left out."""
        key = (worker, stream)
        text = self._pending.pop(key, "") + text.replace("\r\n", "\n")
        *complete, rest = text.split("\n")
        if rest:
            cut = rest.rfind("\r")  # keep what is needed to go on rendering, not every frame
            self._pending[key] = render_line(rest[:cut]) + rest[cut:] if cut > 0 else rest
        label = self.label(worker)
        out = []
        for line in complete:
            shown = render_line(line)
            if not self.show_startup and stream == "stderr" and is_startup_chatter(shown):
                self.hidden[worker] = self.hidden.get(worker, 0) + 1
                continue
            out.append(f"{label}{shown}")
        return out

    def label(self, worker: int) -> str:
        """``[worker i] `` or this kernel's name (``[evaluator] ``)."""
        return worker_label(worker, self.names)

    def rewrites(self, worker: int, stream: str) -> bool:
        """Whether the unfinished line of ``worker`` is being redrawn (``\r`` / ``\b``: a progress bar)."""
        raw = self._pending.get((worker, stream), "")
        return "\r" in raw or "\x08" in raw

    def partial(self, worker: int, stream: str) -> str:
        """The unfinished line of ``worker`` as it shows now ('' when there is none)."""
        return render_line(self._pending.get((worker, stream), ""))

    def take_partial(self, worker: int, stream: str) -> str:
        """The unfinished line of ``worker``, rendered, and forget it."""
        return render_line(self._pending.pop((worker, stream), ""))

    def pending_keys(self) -> list[tuple[int, str]]:
        return list(self._pending)

    def flush(self) -> list[tuple[str, str]]:
        """Any held-back partial lines, as ``(stream, labelled_text)``."""
        out = [(stream, f"{self.label(worker)}{render_line(text)}\n")
               for (worker, stream), text in self._pending.items() if render_line(text)]
        self._pending.clear()
        return out


class TextRelay:
    """An event sink that writes labelled worker output to text streams and rich output to ``display``.

    Worker errors are not printed here: the run's exception shows them, failing worker first. When
    ``live`` (default: stdout is a terminal), the unfinished ``\\r``-line of the last worker that
    wrote one is redrawn in place, labelled, and erased before any finished line is written.
    ``names``: what kernels that are not plain replicas are called (grouping.py ``WorkerNames``).
    """

    def __init__(self, stdout: TextIO, stderr: TextIO, display: DisplayFn | None = None,
                 live: bool | None = None, show_startup: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, num_workers: int = 0,
                 names: WorkerNames = NO_NAMES) -> None:
        self._streams = {"stdout": stdout, "stderr": stderr}
        self.num_workers = num_workers
        self.names = names
        self._results: list[Result] = []
        self._display = display
        self._groups = DisplayGroups(num_workers, names)
        self._labeller = LineLabeller(show_startup, names)
        self._live = _isatty(stdout) if live is None else live
        self._live_shown = False
        self._last_live = -1e9
        self._clock = clock

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunRestarted):  # the lost attempt's unfinished lines end here
            for stream, text in self._labeller.flush():
                self._write(stream, text)
            self._write("stdout", restart_line(event))
            return
        if not isinstance(event, WorkerOutput):
            return
        content = event.content
        if event.msg_type == "stream":
            name = content.get("name", "stdout")
            text = self._labeller.feed(event.worker, name, content.get("text", ""))
            if text:
                self._write(name, text)
            if self._live:
                self._draw_live(event.worker, name)
        elif event.msg_type == "execute_result":  # shown at the end, identical ones once
            self._results.append((event.worker, content.get("data", {}), content.get("metadata", {})))
        elif event.msg_type in ("display_data", "update_display_data"):
            data = content.get("data", {})
            if self._display is not None:
                self._show_display(self._display, event.worker, event.msg_type, content)
            elif "text/plain" in data:
                self._write("stdout", self._labeller.feed(event.worker, "stdout", data["text/plain"] + "\n"))

    def _show_display(self, display: DisplayFn, worker: int, msg_type: str, content: IOPubContent) -> None:
        """A worker's display, after a line saying whose it is. A rich one identical to one another
        worker showed already is not shown again (what was printed cannot be relabelled): a line says so."""
        data = content.get("data", {})
        shared = msg_type == "display_data" and any(m != "text/plain" for m in data) and not (
            content.get("transient") or {}).get("display_id")
        if shared:
            group, new = self._groups.add(worker, data)
            if not new:
                self._write("stdout", f"{self._labeller.label(worker)}output: the same as worker "
                                      f"{self._groups.first(group)}'s above\n")
                return
        self._write("stdout", f"{self._labeller.label(worker)}output:\n")
        display(data, content.get("metadata", {}))

    def flush(self) -> None:
        """The end of a run: held partial lines, then the run's results (identical ones once)."""
        for stream, text in self._labeller.flush():
            self._write(stream, text)
        total = self.num_workers or (max(w for w, _, _ in self._results) + 1 if self._results else 0)
        results, self._results = self._results, []
        for group in grouped_results(results, total, self.names):
            data = with_plain_label(group.data, group.label)
            if self._display is not None:
                self._display(data, group.metadata)
            elif "text/plain" in data:
                self._write("stdout", data["text/plain"] + "\n")

    def late(self, worker: int, origin: str, msg_type: str, content: IOPubContent) -> None:
        """Output ``worker`` sent after ``origin`` had ended, labelled so (see engine/cell/late_output.py)."""
        if msg_type == "stream":
            self._write(content.get("name", "stdout"), late_lines(worker, origin, content.get("text", "")))
        elif msg_type == "error":
            self._write("stderr", late_lines(worker, origin, f"{content.get('ename')}: {content.get('evalue')}"))
        elif "text/plain" in content.get("data", {}):
            self._write("stdout", late_lines(worker, origin, content["data"]["text/plain"]))

    def _draw_live(self, worker: int, stream: str) -> None:
        line = self._labeller.partial(worker, stream)
        now = self._clock()
        if not line or now - self._last_live < 1.0 / LIVE_UPDATES_PER_S:
            return
        self._last_live = now
        out = self._streams["stdout"]
        out.write(f"\r\x1b[K{self._labeller.label(worker)}{line}")
        out.flush()
        self._live_shown = True

    def _write(self, stream: str, text: str) -> None:
        if self._live_shown:  # erase the live line first; the next update redraws it
            self._streams["stdout"].write("\r\x1b[K")
            self._streams["stdout"].flush()
            self._live_shown = False
            self._last_live = -1e9
        out = self._streams.get(stream, self._streams["stdout"])
        out.write(text)
        out.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
