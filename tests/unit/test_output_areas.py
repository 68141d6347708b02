"""Worker output in the cell (pure logic with fake displays; real notebooks: tests/tf/test_cell_output.py,
tests/browser)."""

from __future__ import annotations

import io

from mwnotebook.frontend.notebook.live_chart import ChartOnFirstMetric
from mwnotebook.frontend.notebook.output_areas import WorkerOutputAreas
from mwnotebook.frontend.text.relay import LineLabeller, TextRelay, is_startup_chatter, render_line
from mwnotebook.shared.events import WorkerMetrics, WorkerOutput, WorkerStateChanged


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stream(worker, text, name="stdout"):
    return WorkerOutput(worker, "stream", {"name": name, "text": text})


def make(num_workers=2, **kw):
    published, shown, out, err, clock = [], [], io.StringIO(), io.StringIO(), Clock()
    areas = WorkerOutputAreas(num_workers, publish=lambda b, i, u: published.append((i, u, b["text/plain"])),
                              show=lambda d, m, t: shown.append(d), stdout=out, stderr=err, clock=clock,
                              show_startup=False, **kw)
    return areas, published, shown, out, err, clock


def test_render_line_is_what_a_terminal_shows():
    assert render_line("abc\rX") == "Xbc"
    assert render_line(" 1/20 [..]\x08\x08\x08\x08\x08\x08\x08\x08\x08\x08\r20/20 [==]") == "20/20 [==]"
    assert render_line("plain") == "plain"


def test_startup_chatter_is_recognised_and_user_lines_are_not():
    assert is_startup_chatter("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR")
    assert is_startup_chatter("I0000 00:00:1796073751.319783   17388 cudart_stub.cc:31] Could not find cuda drivers")
    assert is_startup_chatter("E0000 00:00:1796073757.634190   17388 cuda_platform.cc:52] failed call to cuInit: X")
    assert not is_startup_chatter("W0000 00:00:1.0   1 checkpoint.cc:12] Value in checkpoint could not be found")
    assert not is_startup_chatter("my own cudart_stub.cc:31] line")
    labeller = LineLabeller(show_startup=False)
    text = labeller.feed(0, "stderr", "I0000 00:00:1.5   7 port.cc:153] oneDNN custom operations are on\nmine\n")
    assert text == "[worker 0] mine\n" and labeller.hidden == {0: 1}
    assert LineLabeller(show_startup=True).feed(0, "stderr", "I0000 00:00:1.5   7 port.cc:1] x\n").count("port.cc") == 1


def test_progress_line_is_one_live_display_per_worker_throttled_and_final():
    areas, published, _, out, _, clock = make()
    areas(stream(0, "Epoch 1/2\n"))
    for i in range(1, 21):
        clock.now += 0.01  # 100 frames a second
        areas(stream(0, f"\r{i:2d}/20 [{'=' * i}]"))
    ids = {i for i, _, _ in published}
    assert len(ids) == 1 and len(published) <= 3  # 0.2 s at <= 10 updates per second
    assert published[0][2] == "[worker 0]  1/20 [=]" and not published[0][1]
    areas(stream(0, " - loss: 0.5\nEpoch 2/2\n"))
    assert published[-1][2] == "[worker 0] 20/20 [====================] - loss: 0.5" and published[-1][1]
    assert out.getvalue() == "[worker 0] Epoch 1/2\n[worker 0] Epoch 2/2\n"
    areas(stream(0, "\r 1/20 [=]"))
    assert published[-1][0] not in ids  # the next bar gets its own display, below "Epoch 2/2"
    areas.finish()
    assert published[-1][2] == "[worker 0]  1/20 [=]"


def clear_and_print(areas, clock, steps):
    """Worker 0 runs ``clear_output(wait=True); print('step', i)`` ``steps`` times, then the cell ends."""
    for i in range(steps):
        clock.now += 1
        areas(WorkerOutput(0, "clear_output", {"wait": True}))
        areas(stream(0, f"step {i}\n"))
    areas.finish()


def test_clear_output_wait_empties_only_that_workers_area():
    areas, published, _, out, _, clock = make()
    areas(stream(1, "other worker\n"))
    clear_and_print(areas, clock, 30)
    assert published[-1][2] == "[worker 0] step 29"
    assert out.getvalue() == "[worker 1] other worker\n"


def test_clear_output_clears_all_the_worker_wrote_in_a_cell_that_calls_it():
    areas, published, _, out, _, clock = make(areas_from_start=True)
    areas(stream(0, "before the first clear\n"))
    areas(stream(1, "other worker\n"))
    clear_and_print(areas, clock, 5)
    final = {display_id: text for display_id, _, text in published}
    assert sorted(final.values()) == ["[worker 0] step 4", "[worker 1] other worker"]
    assert out.getvalue() == ""  # nothing of worker 0 left outside its area


def test_an_area_keeps_the_last_lines_and_says_how_many_it_left_out():
    areas, published, *_ = make(max_lines=3)
    areas(WorkerOutput(0, "clear_output", {"wait": False}))
    areas(stream(0, "".join(f"line {i}\n" for i in range(10))))
    areas.finish()
    text = published[-1][2]
    assert text.splitlines()[0].startswith("[worker 0] ... 7 earlier lines") and "mw_result.stdout(0)" in text
    assert text.splitlines()[1:] == ["[worker 0] line 7", "[worker 0] line 8", "[worker 0] line 9"]


def test_identical_results_once_for_all_workers_different_ones_each():
    areas, _, shown, *_ = make(3)
    for w in range(3):
        areas(WorkerOutput(w, "execute_result", {"data": {"text/plain": f"<History at 0x7f{w}abc>"}}))
    areas.finish()
    assert shown == [{"text/plain": "[all 3 workers] <History at 0x7f0abc>"}]
    areas, _, shown, *_ = make(3)
    for w, value in ((0, "1"), (1, "2"), (2, "1")):
        areas(WorkerOutput(w, "execute_result", {"data": {"text/plain": value}}))
    areas.finish()
    assert shown == [{"text/plain": "[workers 0, 2] 1"}, {"text/plain": "[worker 1] 2"}]


def test_terminal_relay_redraws_the_live_line_and_erases_it_before_finished_lines():
    out, clock = io.StringIO(), Clock()
    relay = TextRelay(out, io.StringIO(), live=True, clock=clock)
    relay(stream(0, "\r 1/20 [=]"))
    clock.now += 1
    relay(stream(1, "hello\n"))
    relay(stream(0, "\r20/20 [==]\n"))
    assert out.getvalue() == "\r\x1b[K[worker 0]  1/20 [=]\r\x1b[K[worker 1] hello\n[worker 0] 20/20 [==]\n"
    piped = io.StringIO()
    relay = TextRelay(piped, io.StringIO())  # not a terminal: finished lines only
    relay(stream(0, "\r 1/20 [=]\r20/20 [==]\n"))
    assert piped.getvalue() == "[worker 0] 20/20 [==]\n"


def test_chart_appears_at_the_first_metric_only():
    made = []

    class FakeDashboard:
        def __init__(self, n):
            self.events, self.shown, self.finished = [], False, False
            made.append(self)

        def display(self):
            self.shown = True

        def __call__(self, event):
            self.events.append(event)

        def finish(self):
            self.finished = True

    chart = ChartOnFirstMetric(2, factory=FakeDashboard)
    chart(WorkerStateChanged(0, "running"))
    chart(stream(0, "hi\n"))
    chart.finish()
    assert made == []  # no metric, no chart
    chart(WorkerMetrics(0, ({"step": 1, "loss": 0.5},)))
    [dash] = made
    assert dash.shown and dash.events[0] == WorkerStateChanged(0, "running")
    assert isinstance(dash.events[1], WorkerMetrics)
    chart.finish()
    assert dash.finished


def test_a_flood_is_thinned_on_the_page_and_the_cell_says_so():
    areas, _, _, out, _, _ = make(max_page_lines=100)
    for chunk in range(50):
        areas(stream(0, "".join(f"line {chunk * 10 + i}\n" for i in range(10))))
    areas(stream(1, "other\n"))
    areas.finish()
    lines = out.getvalue().splitlines()
    assert lines[:100] == [f"[worker 0] line {i}" for i in range(100)]
    assert "further lines are not shown here; all are in mw_result.stdout(0)" in lines[100]
    assert "[worker 1] other" in lines
    assert lines[-1] == "[worker 0] ... 400 lines not shown here (all are in mw_result.stdout(0))"
    assert areas.thinned == {0: 400}



# -- rich output: whose it is ------------------------------------------------------------------------

PNG_A, PNG_B = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==", "iVBOR-b"


def make_rich(num_workers=2):
    shown: list[tuple[dict, dict]] = []
    areas = WorkerOutputAreas(num_workers, publish=lambda b, i, u: None, show=lambda d, m, t: shown.append((d, dict(t))),
                              stdout=io.StringIO(), stderr=io.StringIO(), clock=Clock(), show_startup=False)
    return areas, shown


def figure(worker, png, transient=None):
    content = {"data": {"image/png": png, "text/plain": "<Figure size 640x480 with 1 Axes>"}, "metadata": {}}
    if transient:
        content["transient"] = transient
    return WorkerOutput(worker, "display_data", content)


def labels_in(shown):
    """What a page shows now: label displays after their updates, and the other outputs."""
    page: list[str] = []
    where: dict[str, int] = {}
    for data, transient in shown:
        name = data["text/plain"] if "text/markdown" in data else data.get("image/png", data.get("text/html", ""))
        if transient.get("update"):
            page[where[transient["display_id"]]] = name
            continue
        if "display_id" in transient:
            where[transient["display_id"]] = len(page)
        page.append(name)
    return page


def test_each_workers_figure_comes_right_after_a_label_every_front_end_shows():
    areas, shown = make_rich()
    areas(figure(0, PNG_A))
    areas(figure(1, PNG_B))
    areas.finish()
    assert labels_in(shown) == ["[worker 0]", PNG_A, "[worker 1]", PNG_B]
    label, fig = shown[0][0], shown[1][0]
    assert set(label) == {"text/plain", "text/html", "text/markdown"}
    assert "[worker 0]" in label["text/html"] and "mw-rich-label" in label["text/html"]
    assert label["text/markdown"] == r"**\[worker 0\]**"
    assert fig == {"image/png": PNG_A, "text/plain": "<Figure size 640x480 with 1 Axes>"}  # as the worker sent it


def test_identical_figures_of_all_workers_show_once_labelled_for_all():
    areas, shown = make_rich(3)
    for w in range(3):
        areas(figure(w, PNG_A))
    areas.finish()
    assert labels_in(shown) == ["[all 3 workers]", PNG_A]
    assert sum("image/png" in d for d, _ in shown) == 1  # the image is sent once, the label updated in place


def test_some_workers_alike_are_named_and_the_kth_figure_matches_the_kth():
    areas, shown = make_rich(3)
    for w, png in ((0, PNG_A), (0, PNG_A), (1, PNG_B), (2, PNG_A), (2, PNG_A)):
        areas(figure(w, png))
    assert labels_in(shown) == ["[workers 0, 2]", PNG_A, "[workers 0, 2]", PNG_A, "[worker 1]", PNG_B]


def test_html_tables_differing_only_in_memory_addresses_are_the_same():
    areas, shown = make_rich()
    for w in range(2):
        areas(WorkerOutput(w, "display_data", {"data": {"text/html": "<table><td>1</td></table>",
                                                        "text/plain": f"<HTML object at 0x7f{w}>"}}))
    assert labels_in(shown) == ["[all 2 workers]", "<table><td>1</td></table>"]


def test_a_display_the_worker_updates_is_labelled_per_worker_and_never_merged():
    areas, shown = make_rich()
    for w in range(2):
        areas(figure(w, PNG_A, {"display_id": "fig"}))
    areas(WorkerOutput(1, "update_display_data", {"data": {"image/png": PNG_B}, "transient": {"display_id": "fig"}}))
    assert labels_in(shown) == ["[worker 0]", PNG_A, "[worker 1]", PNG_B]  # worker 1's copy updated alone
    update = shown[-1]
    assert update[1]["update"] and update[1]["display_id"].endswith("-w1-fig") and update[0] == {"image/png": PNG_B}


def test_text_only_displays_keep_their_label_in_the_text_and_no_label_display():
    areas, shown = make_rich()
    areas(WorkerOutput(1, "display_data", {"data": {"text/plain": "'hello'"}}))
    assert shown == [({"text/plain": "[worker 1] 'hello'"}, {})]


def test_rich_results_of_all_workers_show_once_after_their_label():
    areas, shown = make_rich()
    for w in range(2):
        areas(WorkerOutput(w, "execute_result", {"data": {"image/png": PNG_A, "text/plain": "<Figure>"}}))
    areas.finish()
    assert labels_in(shown) == ["[all 2 workers]", PNG_A]
