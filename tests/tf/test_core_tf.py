"""Real two-worker MultiWorkerMirroredStrategy runs on CPU through the core API and the notebook."""

from __future__ import annotations

import pathlib
import re
import time

import nbformat
import pytest
from nbclient import NotebookClient

from mwnotebook import WorkerError
from testbed.seed_cell import SEED_LINE

pytestmark = pytest.mark.tf

ROOT = pathlib.Path(__file__).resolve().parents[2]

FIT_CELL = '''
import os
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="binary_crossentropy", metrics=["accuracy"])
{before_fit}
history = model.fit(ds, epochs=3, steps_per_epoch=10, verbose=0{callbacks})
print("keras", tf.keras.__name__, "losses", [round(v, 4) for v in history.history["loss"]])
'''


def test_seed_notebook_prints_the_seeds_exact_lines():
    nb = nbformat.read(ROOT / "notebooks" / "01_seed_two_workers.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    (ROOT / "artifacts").mkdir(exist_ok=True)  # the docs' lesson gallery renders this copy (tools/docs.sh)
    nbformat.write(nb, ROOT / "artifacts" / "01_seed_two_workers.executed.ipynb")
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")
    for i in range(2):
        assert re.search(rf"^\[worker {i}\] {re.escape(SEED_LINE.format(i=i))}$", text, re.M), text[-3000:]
    # The TF_CONFIG table was shown, with the same cluster and different indexes.
    tables = [o["data"]["text/plain"] for c in nb.cells for o in c.get("outputs", [])
              if o.get("output_type") == "display_data" and "TF_CONFIG" in o.get("data", {}).get("text/plain", "")]
    assert tables and '"index":0' in tables[0] and '"index":1' in tables[0]


def test_seed_code_via_the_api_and_a_fast_rerun(tf_cluster, seed_code):
    first = tf_cluster.run(seed_code, timeout=240)
    for i in range(2):
        # Exactly what the hand-launched script prints: TF's interactive-shell INFO logs are off.
        assert first.stdout(i) == SEED_LINE.format(i=i) + "\n"
    again = tf_cluster.run(seed_code, timeout=240)
    for i in range(2):
        assert SEED_LINE.format(i=i) in again.stdout(i)


def test_model_fit_on_two_workers(tf_cluster):
    result = tf_cluster.run(FIT_CELL.format(before_fit="", callbacks=""), timeout=240)
    lines = [result.stdout(i).strip().splitlines()[-1] for i in range(2)]
    assert lines[0].startswith("keras tf_keras")  # TF_USE_LEGACY_KERAS=1 by default
    losses = [line.split("losses ", 1)[1] for line in lines]
    assert losses[0] == losses[1]  # the same synchronized updates on both workers


def test_worker_raising_mid_fit_fails_the_cell_fast_and_the_next_cell_runs(tf_cluster, tmp_path):
    stamp = tmp_path / "raised_at"
    raise_on_worker_1 = f'''
import time
class Boom(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if os.environ["MWNOTEBOOK_WORKER_INDEX"] == "1" and batch == 3:
            open({str(stamp)!r}, "w").write(repr(time.time()))
            raise RuntimeError("worker 1 lost its data shard")
'''
    code = FIT_CELL.format(before_fit=raise_on_worker_1, callbacks=", callbacks=[Boom()]")
    with pytest.raises(WorkerError) as info:
        tf_cluster.run(code, timeout=240)
    detected = time.time() - float(stamp.read_text())
    assert detected < 10, f"the cell failed {detected:.1f} s after worker 1 raised"
    err = info.value
    assert err.failures[0].worker == 1
    assert "worker 1 lost its data shard" in err.evalue
    assert any("Boom" in line or "on_train_batch_end" in line for line in err.traceback)
    assert err.restarted
    result = tf_cluster.run(FIT_CELL.format(before_fit="", callbacks=""), timeout=240)
    assert "losses" in result.stdout(0) and "losses" in result.stdout(1)


def test_status_shows_the_devices_tensorflow_sees_in_each_worker(tf_cluster):
    from mwnotebook.frontend.notebook.views import status_bundle

    devices = tf_cluster.devices()
    assert [d["cuda_visible_devices"] for d in devices] == ["-1", "-1"]  # --cpu
    assert all(d["gpus"] == [] and len(d["cpus"]) >= 1 for d in devices)
    table = status_bundle(tf_cluster.status(), devices)["text/plain"]
    assert "1 CPU, 0 GPU (CUDA_VISIBLE_DEVICES=-1)" in table
