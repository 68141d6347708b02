"""Late output routing and its caps (pure; real kernels: tests/integration/test_late_output.py)."""

from __future__ import annotations

import io

from mwnotebook.engine.cell.late_output import LateOrigin, LateOutput
from mwnotebook.frontend.text.relay import TextRelay

from .._shared.iopub import stream as _stream


def test_late_output_is_capped_per_worker_and_cell_and_says_it_was_cut():
    late, got = LateOutput(cap_chars=10), []
    late.listen(got.append)
    cell = LateOrigin("cell 3")
    for _ in range(5):
        late.add(1, _stream("abcdef\n"), cell, "/tmp/w1.log")
    late.add(0, _stream("other\n"), cell)
    texts = [(i.worker, i.content["text"]) for i in got]
    assert texts[:2] == [(1, "abcdef\n"), (1, "abc")]  # what fits under the cap
    assert texts[2][0] == 1 and "cut" in texts[2][1] and "/tmp/w1.log" in texts[2][1]
    assert texts[3] == (0, "other\n") and len(texts) == 4
    assert late.cut == {1: 4 + 3 * 7}


def test_late_output_is_held_bounded_until_someone_listens():
    late = LateOutput(held_chars=12)
    for i in range(4):
        late.add(0, _stream(f"line{i}\n"), LateOrigin("cell 1"))
    late.add(0, {"msg_type": "clear_output", "content": {}}, LateOrigin("cell 1"))  # not placeable late
    held = late.listen(lambda item: None)
    assert [i.content["text"] for i in held] == ["line2\n", "line3\n"] and late.cut == {0: 12}


def test_terminal_relay_labels_late_lines_with_their_cell():
    out = io.StringIO()
    relay = TextRelay(out, out, live=False)
    relay.late(1, "cell 3", "stream", {"name": "stdout", "text": "a\nb\r c\n"})
    assert out.getvalue() == "[worker 1, after cell 3] a\n[worker 1, after cell 3]  c\n"


class FakeSession:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict, dict]] = []

    def send(self, socket, msg_type, content, parent, ident):
        self.sent.append((msg_type, content, parent))


class FakeKernel:
    """What NotebookLateView uses of an ipykernel: the current request and the IOPub send."""

    def __init__(self) -> None:
        self.session, self.iopub_socket, self.request = FakeSession(), object(), {"header": {"msg_id": "c3"}}

    def get_parent(self, channel):
        return self.request


def test_notebook_view_puts_late_output_in_the_running_cell_else_its_own_and_keeps_display_ids():
    from types import SimpleNamespace

    from mwnotebook.engine.cell.late_output import LateItem
    from mwnotebook.frontend.notebook.late_view import NotebookLateView

    kernel = FakeKernel()
    view = NotebookLateView(SimpleNamespace(kernel=kernel, execution_count=3, events=None))
    origin = view.origin("p1")
    view(LateItem(0, "stream", {"name": "stdout", "text": "x\n"}, origin))
    kernel.request = {"header": {"msg_id": "c4"}}
    view._cell_starts()  # cell 4 runs now
    view(LateItem(1, "update_display_data", {"data": {"text/plain": "50%"}, "transient": {"display_id": "d"}},
                  origin))
    (t1, c1, p1), (t2, c2, p2) = kernel.session.sent
    assert (t1, c1["text"], p1["header"]["msg_id"]) == ("stream", "[worker 0, after cell 3] x\n", "c3")
    assert (t2, c2["transient"]["display_id"], p2["header"]["msg_id"]) == ("update_display_data", "mw-p1-w1-d", "c4")
    assert c2["data"]["text/plain"] == "[worker 1, after cell 3] 50%"


def test_notebook_view_labels_a_late_figure_with_a_display_of_its_own():
    """A front end shows only the richest type of a bundle: a late image's label in its text/plain
    would never be seen, so a label display comes first (as for rich output during a cell)."""
    from types import SimpleNamespace

    from mwnotebook.engine.cell.late_output import LateItem
    from mwnotebook.frontend.notebook.late_view import NotebookLateView

    kernel = FakeKernel()
    view = NotebookLateView(SimpleNamespace(kernel=kernel, execution_count=5, events=None))
    origin = view.origin("p2")
    view(LateItem(1, "display_data", {"data": {"image/png": "iVBOR", "text/plain": "<Figure>"}}, origin))
    (t1, label, _), (t2, figure, _) = kernel.session.sent
    assert (t1, t2) == ("display_data", "display_data")
    assert "[worker 1, after cell 5]" in label["data"]["text/html"]
    assert label["data"]["text/plain"] == "[worker 1, after cell 5]"
    assert figure["data"]["image/png"] == "iVBOR"
