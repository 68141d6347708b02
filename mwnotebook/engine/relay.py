"""Pure routing of worker IOPub messages: into events, and into labelled text for a reader.

No I/O happens here except through the writers handed in, so tests feed fake messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from mwnotebook.shared.events import METRICS_MIME, Event, WorkerMetrics, WorkerOutput

DisplayFn = Callable[[dict[str, Any], dict[str, Any]], None]


def events_from_iopub(worker: int, msg: dict[str, Any]) -> list[Event]:
    """Turn one IOPub output message of ``worker`` into events.

    A ``display_data`` carrying :data:`METRICS_MIME` is metrics, never shown as output.
    """
    msg_type = msg["msg_type"]
    content = msg.get("content", {})
    if msg_type == "display_data" and METRICS_MIME in content.get("data", {}):
        payload = content["data"][METRICS_MIME] or {}
        records = tuple(dict(r, worker=worker) for r in payload.get("records", ()))
        return [WorkerMetrics(worker=worker, records=records)] if records else []
    return [WorkerOutput(worker=worker, msg_type=msg_type, content=content)]


def worker_label(worker: int) -> str:
    return f"[worker {worker}] "


class LineLabeller:
    """Prefixes every line of each worker's stdout/stderr with ``[worker i]``.

    Streams arrive in arbitrary chunks; a partial line is held back until its newline arrives or
    :meth:`flush` is called, so a label never lands in the middle of another worker's line.
    """

    def __init__(self) -> None:
        self._pending: dict[tuple[int, str], str] = {}

    def feed(self, worker: int, stream: str, text: str) -> str:
        key = (worker, stream)
        text = self._pending.pop(key, "") + text
        *complete, rest = text.split("\n")
        if rest:
            self._pending[key] = rest
        label = worker_label(worker)
        return "".join(f"{label}{line}\n" for line in complete)

    def flush(self) -> list[tuple[str, str]]:
        """Any held-back partial lines, as ``(stream, labelled_text)``."""
        out = [(stream, f"{worker_label(worker)}{text}\n") for (worker, stream), text in self._pending.items()]
        self._pending.clear()
        return out


class TextRelay:
    """An event sink that writes labelled worker output to text streams and rich output to ``display``.

    Worker errors are not printed here: the run's exception shows them, failing worker first.
    """

    def __init__(self, stdout: TextIO, stderr: TextIO, display: DisplayFn | None = None) -> None:
        self._streams = {"stdout": stdout, "stderr": stderr}
        self._display = display
        self._labeller = LineLabeller()

    def __call__(self, event: Event) -> None:
        if not isinstance(event, WorkerOutput):
            return
        content = event.content
        if event.msg_type == "stream":
            name = content.get("name", "stdout")
            text = self._labeller.feed(event.worker, name, content.get("text", ""))
            if text:
                self._write(name, text)
        elif event.msg_type in ("display_data", "execute_result", "update_display_data"):
            data = content.get("data", {})
            if self._display is not None:
                self._write("stdout", f"{worker_label(event.worker)}output:\n")
                self._display(data, content.get("metadata", {}))
            elif "text/plain" in data:
                self._write("stdout", self._labeller.feed(event.worker, "stdout", data["text/plain"] + "\n"))

    def flush(self) -> None:
        for stream, text in self._labeller.flush():
            self._write(stream, text)

    def _write(self, stream: str, text: str) -> None:
        out = self._streams.get(stream, self._streams["stdout"])
        out.write(text)
        out.flush()
