"""Late worker output in the notebook: what a worker sends after its ``%%mwtrain`` cell returned.

Where it goes follows a plain ipykernel (measured with ipykernel 7.4: a thread's output carries the
kernel's latest request): while the notebook runs a cell, into that cell; while it is idle, into the
cell that started it (JupyterLab keeps a finished cell's request open, so the text is appended there
and saved with it). Either way each line is labelled ``[worker i, after cell N]``. A terminal IPython
prints it, labelled. Capping and the always-written log: :mod:`mwnotebook.engine.cell.late_output`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from mwnotebook.engine.cell.late_output import LateItem, LateOrigin
from mwnotebook.frontend.notebook.output_areas import worker_display_id
from mwnotebook.frontend.notebook.rich_labels import is_rich, label_bundle
from mwnotebook.frontend.text.relay import late_label, late_lines

log = logging.getLogger(__name__)

_views: dict[int, NotebookLateView] = {}


class NotebookLateView:
    """The late-output sink of one IPython shell (a Jupyter kernel's, or a terminal's)."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.kernel = getattr(shell, "kernel", None)
        #: The request of the cell the notebook runs now (None while idle); set on the main thread.
        self._running: dict[str, Any] | None = None
        events = getattr(shell, "events", None)
        if events is not None:
            events.register("pre_run_cell", self._cell_starts)
            events.register("post_run_cell", self._cell_ended)

    def _request(self) -> dict[str, Any] | None:
        if self.kernel is None:
            return None
        try:
            return self.kernel.get_parent("shell") or None
        except Exception:  # an ipykernel without get_parent: late output then follows the origin
            return None

    def _cell_starts(self, *_: Any) -> None:
        self._running = self._request()

    def _cell_ended(self, *_: Any) -> None:
        self._running = None

    def origin(self, display_prefix: str = "") -> LateOrigin:
        """The current cell as an origin (called on the main thread while the cell runs)."""
        return LateOrigin(f"cell {self.shell.execution_count}", ref=(self._request(), display_prefix))

    def __call__(self, item: LateItem) -> None:
        """Show one late item (called on the cluster's event loop thread)."""
        request, prefix = item.origin.ref if isinstance(item.origin.ref, tuple) else (None, "")
        label = item.origin.label
        if self.kernel is None:
            self._print(item)
            return
        parent = self._running or request
        content = item.content
        if item.msg_type == "stream":
            name = content.get("name", "stdout")
            self._send("stream", {"name": name, "text": late_lines(item.worker, label, content.get("text", ""))},
                       parent)
        elif item.msg_type == "error":
            text = late_lines(item.worker, label, f"{content.get('ename')}: {content.get('evalue')}")
            self._send("stream", {"name": "stderr", "text": text}, parent)
        else:
            data = dict(content.get("data", {}))
            tag = late_label(item.worker, label)
            transient = dict(content.get("transient") or {})
            if "display_id" in transient:  # the id its cell gave this worker's display
                transient["display_id"] = worker_display_id(prefix, item.worker, transient["display_id"])
            elif item.msg_type == "update_display_data":
                return
            if "text/plain" in data:
                data["text/plain"] = tag + str(data["text/plain"])
            if is_rich(data) and item.msg_type == "display_data":
                # a front end shows the richest type only: the label is a display of its own before
                # it, as for a worker's rich output during its cell (rich_labels.py)
                self._send("display_data", {"data": label_bundle(tag, [item.worker]), "metadata": {},
                                            "transient": {}}, parent)
            self._send(item.msg_type, {"data": data, "metadata": content.get("metadata", {}),
                                       "transient": transient}, parent)

    def _send(self, msg_type: str, content: dict[str, Any], parent: dict[str, Any] | None) -> None:
        """Publish on the notebook kernel's IOPub with ``parent`` (thread-safe: ipykernel queues
        sends to its IOPub thread)."""
        kernel: Any = self.kernel
        topic = f"stream.{content['name']}" if msg_type == "stream" else "display_data"
        kernel.session.send(kernel.iopub_socket, msg_type, content, parent=parent or {}, ident=topic.encode())

    def _print(self, item: LateItem) -> None:
        content = item.content
        if item.msg_type == "stream":
            stream = sys.stderr if content.get("name") == "stderr" else sys.stdout
            text = content.get("text", "")
        else:
            stream = sys.stdout
            text = str(content.get("data", {}).get("text/plain", "")) if item.msg_type != "error" else (
                f"{content.get('ename')}: {content.get('evalue')}")
        if text:
            stream.write(late_lines(item.worker, item.origin.label, text))
            stream.flush()


def view_for(shell: Any) -> NotebookLateView:
    view = _views.get(id(shell))
    if view is None or view.shell is not shell:
        view = _views[id(shell)] = NotebookLateView(shell)
    return view


def begin_cell(shell: Any, cluster: Any, output: Any) -> None:
    """Before a ``%%mwtrain`` cell runs: late output of this cell is labelled with it, and shown."""
    late = getattr(cluster, "late_output", None)
    if late is None:  # a cluster-like object without workers of its own (tests' fakes)
        return
    view = view_for(shell)
    late.set_origin(view.origin(getattr(output, "display_prefix", "")))
    for held in late.listen(view):  # output that came while nobody listened (e.g. before a restart)
        view(held)
