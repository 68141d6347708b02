"""What a user sees in a %%mwtrain cell of a real notebook (nbclient, real TF workers): one labelled
area per worker with \\r lines rendered, a chart only where metrics come, no repeats, quiet start."""

from __future__ import annotations

import json
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.tf, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[2]

FIT = '''%%mwtrain --workers 2 --cpu
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(640, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="binary_crossentropy", metrics=["accuracy"])
model.fit(ds, epochs=3, steps_per_epoch=20)
'''
#: The fit with worker 1's input sleeping 60 ms per batch: the cell ends with the slow worker's line.
SLOW_FIT = FIT.replace("ds = tf.data", "import time, mwnotebook.worker as mw\nds = tf.data").replace(
    ".batch(32)", ".batch(32).map(lambda a, b: (tf.reshape(tf.py_function(lambda t: time.sleep(0.06 * mw.task_index()) "
    "or t, [a], tf.float32), [-1, 8]), b))").replace("epochs=3, steps_per_epoch=20)", "epochs=1, steps_per_epoch=30, verbose=0)")
#: ``%mwcluster status``'s memory column beside psutil's reading of the same pid, in the notebook
#: kernel while the workers live (idle kernels: their memory holds still).
USAGE_AGAINST_PSUTIL = """from IPython.utils.capture import capture_output
import psutil
with capture_output() as cap:
    get_ipython().run_line_magic("mwcluster", "status")
text = "".join(o.data.get("text/plain", "") for o in cap.outputs)
for row in text.split("CPU and memory, read on each worker's host\\n", 1)[1].splitlines()[1:]:
    worker, host, pid, cpu, memory = row.split()[:5]
    print("USAGE", worker, memory, psutil.Process(int(pid)).memory_info().rss / 2**20)
"""
CELLS = [
    "%load_ext mwnotebook",
    '%%mwtrain --workers 2 --cpu\nprint("hi")',
    FIT,
    "%%mwtrain --workers 2 --cpu\nfrom tqdm.auto import tqdm\nimport time\nfor i in tqdm(range(40)):\n    time.sleep(0.01)",
    "%%mwtrain --workers 2 --cpu\nfrom IPython.display import clear_output\nfor i in range(30):\n"
    "    clear_output(wait=True)\n    print('step', i)",
    "%%mwtrain --workers 2 --cpu\nimport os\nint(os.environ['MWNOTEBOOK_WORKER_INDEX']) * 10",
    SLOW_FIT,
    "%mwcluster status",
    USAGE_AGAINST_PSUTIL,
]


def worker_text(outputs: list, worker: int) -> str:
    """Everything shown for ``worker`` in one cell's saved outputs, in order: its labelled stream
    lines and its displays (live lines, its clear_output area)."""
    label = f"[worker {worker}] "
    lines: list[str] = []
    for o in outputs:
        if o.get("output_type") == "stream":
            lines += [line for line in o["text"].splitlines() if line.startswith(label)]
        elif o.get("output_type") == "display_data" and f"data-worker='{worker}'" in o["data"].get("text/html", ""):
            lines += o["data"]["text/plain"].splitlines()
    return "\n".join(lines)


def live_lines(outputs: list, worker: int) -> list[str]:
    return [o["data"]["text/plain"] for o in outputs if o.get("output_type") == "display_data"
            and "mw-live-line" in o["data"].get("text/html", "") and f"data-worker='{worker}'" in o["data"]["text/html"]]


def points(values: object) -> int:
    """Number of points of a plotly JSON trace axis (plotly 6 encodes arrays as typed base64)."""
    if isinstance(values, dict) and "bdata" in values:
        import base64

        import numpy as np

        return len(np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]))
    return len(values or [])


def is_chart(output: dict) -> bool:
    data = output.get("data", {})
    return ("application/vnd.plotly.v1+json" in data or "application/vnd.jupyter.widget-view+json" in data
            or "mw-live-chart" in data.get("text/html", ""))


@pytest.fixture(scope="module")
def executed_file(tmp_path_factory) -> tuple[nbformat.NotebookNode, pathlib.Path]:
    """The notebook run by nbclient, and where it was saved."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    # Widget state is left out as JupyterLab leaves it out by default: plotly 6's FigureWidget state
    # carries all of plotly.js (~5 MB); the outputs carry the chart's static copy.
    NotebookClient(nb, timeout=400, kernel_name="python3", store_widget_state=False,
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    path = tmp_path_factory.mktemp("nb") / "fit.ipynb"
    nbformat.write(nb, path)
    return nb, path


@pytest.fixture(scope="module")
def executed(executed_file) -> tuple[nbformat.NotebookNode, int]:
    nb, path = executed_file
    return nb, path.stat().st_size


def test_a_cell_without_metrics_draws_no_chart(executed):
    nb, _ = executed
    outputs = nb.cells[1].outputs
    assert not any(is_chart(o) for o in outputs)
    assert not any("mw-status" in o.get("data", {}).get("text/html", "") for o in outputs)
    assert worker_text(outputs, 0) == "[worker 0] hi" and worker_text(outputs, 1) == "[worker 1] hi"


def test_fit_progress_is_one_labelled_line_per_epoch_and_worker(executed):
    nb, size = executed
    outputs = nb.cells[2].outputs
    for w in (0, 1):
        text = worker_text(outputs, w)
        lines = text.splitlines()
        assert all(line.startswith(f"[worker {w}] ") for line in lines), text
        finals = [line for line in lines if "20/20" in line]
        assert len(finals) == 3, text  # one final bar per epoch, no frames
        assert not any(" 5/20" in line for line in lines), text
        assert "\r" not in text and "\x08" not in text
        assert [line for line in live_lines(outputs, w) if "20/20" in line] == finals  # drawn in place
        assert "cudart_stub" not in text and "absl::InitializeLog" not in text  # quiet start
    print(f"saved notebook after a 3-epoch fit(verbose=1) on 2 workers: {size} bytes")
    assert size < 200_000


def test_fit_draws_curves_without_a_callback_in_the_cell(executed):
    nb, _ = executed
    charts = [o for o in nb.cells[2].outputs if is_chart(o)]
    assert charts, [o.get("data", {}).keys() for o in nb.cells[2].outputs]
    figure = charts[-1]["data"]["application/vnd.plotly.v1+json"]
    traces = {t["name"]: t for t in figure["data"]}
    assert any(name.startswith("worker 0") and points(t.get("x")) >= 10 for name, t in traces.items()), list(traces)
    assert any(name.startswith("worker 1") and points(t.get("x")) >= 10 for name, t in traces.items()), list(traces)
    assert any(name.startswith("global") and points(t.get("x")) >= 10 for name, t in traces.items()), list(traces)
    assert len(charts) == 1  # one chart per cell, its static copy saved


def test_identical_results_show_once_for_all_workers(executed):
    nb, _ = executed
    history = [o for o in nb.cells[2].outputs if "History" in o.get("data", {}).get("text/plain", "")]
    assert len(history) == 1 and history[0]["data"]["text/plain"].startswith("[all 2 workers] "), history
    different = [o["data"]["text/plain"] for o in nb.cells[5].outputs if o.get("output_type") == "display_data"
                 and "mw-worker-output" not in o["data"].get("text/html", "")]
    assert different == ["[worker 0] 0", "[worker 1] 10"], different


def test_tqdm_auto_in_a_worker_shows_a_text_bar(executed):
    nb, _ = executed
    outputs = nb.cells[3].outputs
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    for w in (0, 1):
        text = worker_text(outputs, w)
        assert "100%" in text and [line for line in text.splitlines() if "40/" in line] == live_lines(outputs, w), text
        assert len(live_lines(outputs, w)) == 1 and "40/40" in live_lines(outputs, w)[0]


def test_clear_output_in_a_worker_clears_its_area(executed):
    nb, _ = executed
    for w in (0, 1):
        assert worker_text(nb.cells[4].outputs, w) == f"[worker {w}] step 29"


def test_saved_outputs_are_valid_json(executed_file):
    """The file on disk (not the object in memory) is a valid nbformat 4 notebook whose every cell
    reads back with the same outputs and the same per-worker text."""
    nb, path = executed_file
    saved = json.loads(path.read_text())
    nbformat.validate(nbformat.from_dict(saved))  # raises ValidationError naming the bad output
    back = nbformat.read(path, as_version=4)
    assert len(back.cells) == len(CELLS)
    for ran, read in zip(nb.cells, back.cells):
        assert len(read.outputs) == len(ran.outputs)
        for w in (0, 1):
            assert worker_text(read.outputs, w) == worker_text(ran.outputs, w)


def test_a_fit_with_a_slow_worker_ends_with_one_line_naming_it(executed):
    """The status table splits each worker's step; the line comes only under the slow fit
    (mwnotebook/shared/step_times.py), not under the even FIT cell."""
    nb, _ = executed
    slow = [o for o in nb.cells[6].outputs if o.get("output_type") == "stream" and "is the slow worker" in o["text"]]
    assert len(slow) == 1, nb.cells[6].outputs
    assert slow[0]["text"].startswith("mwnotebook: worker 1 is the slow worker, input-bound"), slow[0]["text"]
    html = "".join(o.get("data", {}).get("text/html", "") for o in nb.cells[6].outputs)
    assert "ms before collective" in html
    even = [o for o in nb.cells[2].outputs if o.get("output_type") == "stream" and "slow worker" in o["text"]]
    assert even == []


def test_mwcluster_status_shows_each_workers_cpu_and_memory(executed):
    """``%mwcluster status``'s second table (engine/usage.py, frontend/notebook/usage_view.py)."""
    nb, _ = executed
    text = "".join(o.get("data", {}).get("text/plain", "") for o in nb.cells[7].outputs)
    lines = text.split("CPU and memory, read on each worker's host\n", 1)[1].splitlines()
    assert lines[0].split() == ["worker", "host", "pid", "CPU", "%", "memory", "MiB", "limit", "MiB", "note"], text
    assert [line.split()[0] for line in lines[1:]] == ["0", "1"], text
    usage = [line.split() for o in nb.cells[8].outputs if o.get("output_type") == "stream"
             for line in o["text"].splitlines() if line.startswith("USAGE")]
    assert [u[1] for u in usage] == ["0", "1"], nb.cells[8].outputs
    for _, _, shown, rss in usage:
        assert abs(float(shown) - float(rss)) <= max(20.0, 0.1 * float(rss)), usage
