"""Live metrics from real two-worker MultiWorkerMirroredStrategy runs, checked against ground truth.

The dashboard is fed the cluster's real events; the values it PLOTS (its figure's traces) are
compared with values the workers compute independently of the reporting path:

* custom loop: each worker prints, per step, the global loss its ``train_step`` returned and its
  own local loss; the seed's own ``initial_loss`` / ``final_loss`` lines (computed by the seed's
  code, not by us) must equal the mean of the plotted global curve over the first / last epoch;
* Keras ``fit``: a ground-truth callback reads each metric with ``metric.result()`` in
  cross-replica context (a real all-reduce over both workers) after every batch; the plotted
  global curve must match it, as must the batch logs callbacks get (tf_keras alone would give
  them summed over the workers: tests/tf/test_keras_global_logs.py).
"""

from __future__ import annotations

import base64
import json
import pathlib
import re

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from mwnotebook.dashboard import Dashboard
from mwnotebook.shared.events import WorkerMetrics
from testbed.seed_cell import expected_line

pytestmark = pytest.mark.tf


def _json_lines(text: str, tag: str) -> list[dict]:
    return [json.loads(line[len(tag):]) for line in text.splitlines() if line.startswith(tag)]


def _trace(dash: Dashboard, name_start: str):
    traces = [t for t in dash.figure.data if t.name.startswith(name_start)]
    assert len(traces) == 1, [t.name for t in dash.figure.data]
    return np.asarray(traces[0].x, dtype=float), np.asarray(traces[0].y, dtype=float)


def _instrument_seed(seed_code: str, report_inside_function: bool) -> str:
    """The seed program, reporting every step: local loss per worker and the global loss."""
    code = seed_code.replace(
        "import tensorflow as tf\n", "import tensorflow as tf\nimport mwnotebook.worker as mw\n", 1)
    # the replica's own mean loss over its shard of the batch, returned beside the scaled loss
    code = code.replace(
        "        return loss\n",
        "        return loss, tf.reduce_mean(per_example_loss)\n", 1)
    reduce_old = """    per_replica_losses = strategy.run(replica_step, args=(next(iterator),))
    return strategy.reduce(
        tf.distribute.ReduceOp.SUM,
        per_replica_losses,
        axis=None,
    )"""
    assert reduce_old in code
    reported = "    mw.report(loss=local_loss, global_loss=global_loss)\n" if report_inside_function else ""
    code = code.replace(reduce_old, f"""    per_replica_losses, per_replica_local = strategy.run(replica_step, args=(next(iterator),))
    global_loss = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)
    local_loss = strategy.experimental_local_results(per_replica_local)[0]
{reported}    return global_loss, local_loss""")
    loop_old = "        total_loss += train_step(distributed_iterator)\n"
    assert loop_old in code
    outside = "" if report_inside_function else "        mw.report(step=step, loss=local_loss, global_loss=global_loss)\n"
    code = code.replace(loop_old, f"""        global_loss, local_loss = train_step(distributed_iterator)
        total_loss += global_loss
{outside}        print("TRUTH " + json.dumps({{"step": step, "global": float(global_loss), "local": float(local_loss)}}))
        step += 1
""")
    code = code.replace("initial_loss = None\n", "initial_loss = None\nstep = 0\n", 1)
    return code


@pytest.mark.parametrize("inside_function", [False, True], ids=["eager", "inside_tf_function"])
def test_custom_loop_curves_match_ground_truth(tf_cluster, seed_code, inside_function, no_orphans):
    dash = Dashboard(2)
    code = _instrument_seed(seed_code, report_inside_function=inside_function)
    result = tf_cluster.run(code, on_event=dash, timeout=300)
    dash.finish()

    for i in range(2):  # reporting changes nothing in training: the seed's exact result
        assert expected_line(i) in result.stdout(i)
    truth = {i: _json_lines(result.stdout(i), "TRUTH ") for i in range(2)}
    assert [t["step"] for t in truth[0]] == list(range(12))

    # every record arrived (the cell-end flush lost nothing), and each carries its worker
    assert sorted((r["worker"], r["step"]) for r in dash.records) == [(w, s) for w in range(2) for s in range(12)]
    assert len(result.metrics) == 24

    # the plotted local curves are each worker's own loss...
    for w in range(2):
        x, y = _trace(dash, f"worker {w} (local loss)")
        assert list(x) == list(range(12))
        # the figure keeps 6 significant digits (frontend/chart/plotly_figure.py): <= 5e-6 relative
        np.testing.assert_allclose(y, [t["local"] for t in truth[w]], rtol=5e-6)
    # ...which differ between workers (different shards), while the global curve is one value
    assert not np.allclose(_trace(dash, "worker 0")[1], _trace(dash, "worker 1")[1])
    gx, gy = _trace(dash, "global loss")
    np.testing.assert_allclose(gy, [t["global"] for t in truth[0]], rtol=5e-6)
    np.testing.assert_allclose(gy, [t["global"] for t in truth[1]], rtol=5e-6)
    # global = mean of the two workers' local losses (equal shards of the global batch)
    local_mean = (_trace(dash, "worker 0")[1] + _trace(dash, "worker 1")[1]) / 2
    np.testing.assert_allclose(gy, local_mean, rtol=1e-5)
    # the seed's own numbers, printed by its own code, from the plotted global curve
    seed = re.search(r"initial_loss=([\d.]+) final_loss=([\d.]+)", result.stdout(0))
    assert float(seed.group(1)) == pytest.approx(gy[:4].mean(), abs=6e-5)
    assert float(seed.group(2)) == pytest.approx(gy[-4:].mean(), abs=6e-5)


KERAS_CELL = '''
import json
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw

strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(3)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, :1] + 0.3 * x[:, 1:2] > 0).astype("float32")

def dataset_fn(ctx):
    return (tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .repeat().batch(16))

ds = strategy.distribute_datasets_from_function(dataset_fn)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="binary_crossentropy", metrics=["accuracy"])

class Truth(tf.keras.callbacks.Callback):
    """Ground truth: metric.result() in cross-replica context = an all-reduce over both workers."""
    def __init__(self):
        super().__init__()
        self.step = 0
    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        truth = {m.name: float(m.result()) for m in self.model.metrics}
        raw = {k: float(v) for k, v in logs.items()}
        print("TRUTH " + json.dumps({"step": self.step, "truth": truth, "raw": raw}))

history = model.fit(ds, epochs=3, steps_per_epoch=8, verbose=0, callbacks=[mw.keras_callback(), Truth()])
print("HISTORY " + json.dumps(history.history))
print("KERAS " + tf.keras.__name__ + " " + type(model).__module__)
'''


def test_keras_fit_curves_show_true_global_and_local_values(tf_cluster, no_orphans):
    dash = Dashboard(2)
    result = tf_cluster.run(KERAS_CELL, on_event=dash, timeout=300)
    dash.finish()
    assert "tf_keras" in result.stdout(0), "this test is about tf_keras under MWMS"

    truth = _json_lines(result.stdout(0), "TRUTH ")
    assert [t["step"] for t in truth] == list(range(1, 25))
    assert truth == _json_lines(result.stdout(1), "TRUTH ")  # the all-reduced truth is the same
    history = _json_lines(result.stdout(0), "HISTORY ")[0]
    true_loss = np.array([t["truth"]["loss"] for t in truth])
    raw_loss = np.array([t["raw"]["loss"] for t in truth])
    # the batch logs callbacks get are the global values (the worker's hook; not tf_keras' sum)...
    np.testing.assert_allclose(raw_loss, true_loss, rtol=1e-4)
    # ...so the callback, which divided tf_keras' sums, must not divide them again

    gx, gy = _trace(dash, "global loss")
    assert list(gx) == list(range(1, 25))
    np.testing.assert_allclose(gy, true_loss, rtol=1e-4)
    # at each epoch's last batch, the running mean is Keras' (correct) epoch value
    np.testing.assert_allclose(gy[[7, 15, 23]], history["loss"], rtol=1e-4)

    # local curves: each worker's own running mean; their mean is the truth (equal batches)
    locals_ = [_trace(dash, f"worker {w} (local loss)") for w in range(2)]
    for x, _ in locals_:
        assert list(x) == list(range(1, 25))
    np.testing.assert_allclose((locals_[0][1] + locals_[1][1]) / 2, true_loss, rtol=1e-4)
    assert not np.allclose(locals_[0][1], locals_[1][1])

    # accuracy is corrected the same way (records hold every metric, not only the plotted one)
    frame = dash.dataframe()
    batches = frame[(frame["kind"] == "batch") & (frame["worker"] == 0)].sort_values("step")
    np.testing.assert_allclose(batches["global_accuracy"], [t["truth"]["accuracy"] for t in truth], rtol=1e-4)
    epochs = frame[(frame["kind"] == "epoch") & (frame["worker"] == 1)].sort_values("epoch")
    np.testing.assert_allclose(epochs["global_loss"], history["loss"], rtol=1e-5)
    np.testing.assert_allclose(epochs["global_accuracy"], history["accuracy"], rtol=1e-5)


REPORT_RATE_CELL = '''
import time
import mwnotebook.worker as mw
start = time.perf_counter()
for i in range(3000):
    mw.report(step=i, loss=1.0 / (i + 1))
    time.sleep(0.0005)
print("ELAPSED", time.perf_counter() - start)
'''


def test_reports_are_batched_to_at_most_about_ten_messages_per_second(tf_cluster, no_orphans):
    messages: list[WorkerMetrics] = []
    result = tf_cluster.run(REPORT_RATE_CELL, on_event=lambda e: isinstance(e, WorkerMetrics) and messages.append(e),
                            timeout=120)
    for w in range(2):
        elapsed = float(result.stdout(w).split("ELAPSED")[1])
        mine = [m for m in messages if m.worker == w]
        assert sum(len(m.records) for m in mine) == 3000
        assert [r["step"] for m in mine for r in m.records] == list(range(3000))
        # at most one message per 0.1 s (the first goes at once), plus the one at the cell's end
        assert len(mine) <= elapsed / 0.1 + 3, (len(mine), elapsed)
        assert len(mine) >= 2, "records must travel while the cell runs, not only at its end"


NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"


def _points(array) -> int:
    """Length of a plotly JSON array: a list, or plotly's base64 typed-array spec."""
    if isinstance(array, dict) and "bdata" in array:
        return len(base64.b64decode(array["bdata"])) // np.dtype(array["dtype"]).itemsize
    return len(array)


def _chart_outputs(nb) -> list[dict]:
    return [o["data"]["application/vnd.plotly.v1+json"] for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if "application/vnd.plotly.v1+json" in o.get("data", {})]


@pytest.mark.slow
@pytest.mark.parametrize("name, points", [("02_keras_fit_live_curves.ipynb", 100),
                                          ("03_custom_loop_live_curves.ipynb", 200)])
def test_lesson_notebook_runs_and_saves_a_static_chart(name, points, tmp_path, no_orphans):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    artifacts = pathlib.Path(__file__).resolve().parents[2] / "artifacts"
    artifacts.mkdir(exist_ok=True)
    nbformat.write(nb, artifacts / name.replace(".ipynb", ".executed.ipynb"))
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")
    assert "check passed" in text, text[-3000:]
    # the saved notebook holds the final chart as static plotly JSON + HTML (the live widget's
    # display was replaced), so it renders without a kernel
    charts = _chart_outputs(nb)
    assert len(charts) == 1, charts
    traces = {t["name"]: t for t in charts[0]["data"]}
    # a plot per metric: the loss plot's worker and global lines are there (compiled metrics get theirs)
    assert {"worker 0 (local loss)", "worker 1 (local loss)", "global loss (all workers)"} <= set(traces), set(traces)
    assert all(n.startswith(("worker 0 (local ", "worker 1 (local ", "global ")) for n in traces), set(traces)
    assert {n: _points(t["x"]) for n, t in traces.items()} == dict.fromkeys(traces, points)
    html = [o["data"]["text/html"] for c in nb.cells for o in c.get("outputs", [])
            if "application/vnd.plotly.v1+json" in o.get("data", {})][0]
    assert "worker 1 (local loss)" in html and "<svg" in html and "Plotly.newPlot" in html
    widget_views = [o for c in nb.cells for o in c.get("outputs", [])
                    if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widget_views == [], "live widgets must be replaced by static copies at the end"
    status = [o["data"]["text/html"] for c in nb.cells for o in c.get("outputs", [])
              if "mw-status" in o.get("data", {}).get("text/html", "")]
    assert status and status[0].count("mw-done") == 2, status


def test_reporter_keeps_tensors_until_flush_and_snapshots_variables():
    """In-process: what report() buffers, when it converts, and what it sends."""
    import tensorflow as tf

    from mwnotebook.worker._report import Reporter

    sent: list[list[dict]] = []
    reporter = Reporter(publish=lambda records: sent.append(records) or True, interval=3600)
    variable = tf.Variable(1.0)

    @tf.function
    def step_fn(i):
        loss = tf.cast(i, tf.float32) * 2.0
        reporter.report(step=i, loss=loss)  # symbolic here: recorded when the step runs
        return loss

    reporter.report(step=0, loss=tf.constant(0.5), var=variable, n=np.int64(3), bad=float("inf"))
    variable.assign(7.0)  # after the report: the buffered value must stay 1.0
    for i in (1, 2):
        step_fn(tf.constant(i))
    reporter.report(loss=0.25)  # no step: one more than the previous
    assert len(sent) == 1 and len(sent[0]) == 1  # the first report goes out at once, then buffering
    reporter.flush()
    records = sent[0] + sent[1]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert records[0]["loss"] == 0.5 and records[0]["var"] == 1.0 and records[0]["n"] == 3
    assert records[0]["bad"] == "Infinity"
    assert [r["loss"] for r in records[1:]] == [2.0, 4.0, 0.25]
    assert all(isinstance(r["loss"], float) for r in records)
    json.dumps(records, allow_nan=False)  # what the kernel's session will do
    with pytest.raises(TypeError):
        reporter.report(step=1)
    with pytest.raises(TypeError):
        reporter.report(step=1, worker=3)


FAILING_CELL = '''
import os
import time
import mwnotebook.worker as mw
for step in range(20):
    mw.report(step=step, loss=1.0 / (step + 1))
    time.sleep(0.02)
if os.environ["MWNOTEBOOK_WORKER_INDEX"] == "1":
    raise ValueError("worker 1 gives up")
time.sleep(30)  # worker 0 would wait here (as in a collective) until the cluster stops it
'''


def test_a_failed_worker_turns_red_with_its_error_name(no_orphans):
    from mwnotebook import Cluster, ClusterRunError

    dash = Dashboard(2)
    # its own cluster: a failure restarts the group, which must not disturb the shared one
    with Cluster(workers=2, cpu=True) as cluster, pytest.raises(ClusterRunError) as failure:
        cluster.run(FAILING_CELL, on_event=dash, timeout=120)
    dash.finish()
    assert failure.value.worker == 1
    rows = {row["worker"]: row for row in dash.status_rows()}
    assert rows[1]["state"] == "failed" and rows[1]["error"] == "ValueError", rows
    assert rows[0]["state"] != "failed" or rows[0]["error"] != "ValueError", rows
    html = dash.status_html()
    failed_rows = [r for r in html.split("<tr") if "mw-failed" in r]
    assert any("ValueError" in r and "#f8d7da" in r for r in failed_rows), html
    assert "failed: ValueError" in dash.figure.data[1].name
    # what the workers reported before the failure is all there
    assert [r["step"] for r in dash.records if r["worker"] == 1] == list(range(20))
