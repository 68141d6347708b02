"""One display-id scheme for worker displays (mwnotebook/frontend/notebook/output_areas.py
``worker_display_id``): a display a worker made in its cell and a late update of it from a thread
(frontend/notebook/late_view.py) name the same notebook display; two workers' equal ids do not."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

from mwnotebook.engine.cell.late_output import LateItem
from mwnotebook.frontend.notebook.late_view import NotebookLateView
from mwnotebook.frontend.notebook.output_areas import WorkerOutputAreas
from mwnotebook.shared.events import WorkerOutput


class _Kernel:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.iopub_socket = object()
        self.session = SimpleNamespace(send=lambda sock, msg_type, content, parent, ident:
                                       self.sent.append((msg_type, content)))

    def get_parent(self, channel: str) -> dict[str, Any]:
        return {"header": {"msg_id": "c1"}}


def test_a_late_update_finds_the_display_its_cell_made() -> None:
    shown: list[dict[str, Any]] = []
    areas = WorkerOutputAreas(2, publish=lambda b, i, u: None, show=lambda d, m, t: shown.append(t),
                              stdout=io.StringIO(), stderr=io.StringIO(), show_startup=False)
    for worker in (0, 1):
        areas(WorkerOutput(worker, "display_data", {"data": {"text/plain": "0%"}, "transient": {"display_id": "bar"}}))
    areas.finish()
    kernel = _Kernel()
    view = NotebookLateView(SimpleNamespace(kernel=kernel, execution_count=1, events=None))
    view(LateItem(1, "update_display_data", {"data": {"text/plain": "100%"}, "transient": {"display_id": "bar"}},
                  view.origin(areas.display_prefix)))
    ids = [t["display_id"] for t in shown]
    assert len(set(ids)) == 2  # worker 0's "bar" is not worker 1's
    (msg_type, content), = kernel.sent
    assert msg_type == "update_display_data" and content["transient"]["display_id"] == ids[1]
