"""Experiments kept and compared, with the real tools: %%mwtrain in a real notebook kernel
on two real TensorFlow workers (one cluster for the module), its runs read back by TensorBoard's own
event reader and MLflow's own client (a local sqlite store), %mwruns, a restarted kernel's history,
and each bad input (an unwritable directory, a tracking server down or refusing, MLflow missing)."""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from testbed.processes import worker_processes

pytestmark = [pytest.mark.tf]

FIT = '''%%mwtrain --workers 2 --cpu {options}
import json, os
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(3)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, :1] + 0.3 * x[:, 1:2] > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.Adam({lr}), loss="binary_crossentropy", metrics=["accuracy"])
history = model.fit(ds, epochs=3, steps_per_epoch=6, verbose=0{callbacks})
print("HISTORY " + json.dumps(history.history))
'''


class Notebook:
    """A real notebook kernel (jupyter_client), its cells' outputs as text."""

    def __init__(self, runtime: Path, env: dict[str, str]) -> None:
        self.env = env
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, cwd=str(runtime))
        self.client = self.km.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)
        self.last_stdout = ""  # what the running cell printed so far (another thread may read it)

    def run(self, code: str, timeout: float = 300) -> dict[str, Any]:
        """``stdout``, ``stderr``, ``data`` (text/plain of displays) and ``error`` (ename: evalue or "")."""
        out: dict[str, Any] = {"stdout": "", "stderr": "", "data": "", "error": ""}
        self.last_stdout = ""

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out[content["name"]] += content["text"]
                if content["name"] == "stdout":
                    self.last_stdout += content["text"]
            elif kind in ("display_data", "execute_result", "update_display_data"):
                out["data"] += content["data"].get("text/plain", "") + "\n"
            elif kind == "error":
                out["error"] = f"{content['ename']}: {content['evalue']}"

        self.client.execute_interactive(code, timeout=timeout, output_hook=hook)  # a generous hang bound
        return out

    def value(self, expression: str) -> Any:
        """A JSON-able value from the kernel."""
        got = self.run(f"import json as _j\nprint('VALUE ' + _j.dumps({expression}))")
        assert not got["error"], got
        return json.loads(got["stdout"].split("VALUE ", 1)[1])

    def restart(self) -> None:
        self.km.restart_kernel(now=True)
        self.client.wait_for_ready(timeout=120)

    def close(self) -> None:
        self.client.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("experiments")
    return {"root": root, "runtime": root / "runtime", "tb": root / "tb", "mlflow": root / "mlflow.db"}


@pytest.fixture(scope="module")
def notebook(places: dict[str, Path]) -> Iterator[Notebook]:
    places["runtime"].mkdir()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(places["runtime"]),
               MLFLOW_TRACKING_URI=f"sqlite:///{places['mlflow']}")
    env.pop("MLFLOW_EXPERIMENT_NAME", None)
    nb = Notebook(places["root"], env)
    try:
        assert not nb.run("%load_ext mwnotebook")["error"]
        yield nb
        nb.run("%mwcluster stop")
    finally:
        nb.close()


def _fit(notebook: Notebook, lr: float, options: str = "", callbacks: str = "") -> dict[str, Any]:
    got = notebook.run(FIT.format(options=options, lr=lr, callbacks=callbacks))
    assert not got["error"], got
    return got


def _histories(stdout: str) -> dict[int, dict[str, list[float]]]:
    """Each worker's Keras history, as the cell printed it (``[worker i] HISTORY {...}``)."""
    found = re.findall(r"\[worker (\d)\] HISTORY (\{.*\})", stdout)
    return {int(w): json.loads(h) for w, h in found}


def _events(folder: Path) -> dict[str, list[tuple[int, float, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return {tag: [(e.step, e.wall_time, e.value) for e in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def test_mlflow_missing_is_refused_before_any_worker_starts(notebook: Notebook) -> None:
    before = {p.pid for p in worker_processes()}
    # this kernel's Python without MLflow: a finder that refuses to import it
    notebook.run("import sys\nclass _NoMLflow:\n    def find_spec(self, name, path=None, target=None):\n"
                 "        if name.split('.')[0] == 'mlflow':\n            raise ModuleNotFoundError(name)\n"
                 "sys.meta_path.insert(0, _NoMLflow())")
    try:
        got = notebook.run(FIT.format(options="--mlflow", lr=0.05, callbacks=""))
    finally:
        notebook.run("sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_NoMLflow']")
    usage = got["stderr"]  # IPython shows a UsageError as one line on stderr
    assert usage.startswith("UsageError: %%mwtrain: --mlflow needs MLflow"), got
    assert "pip install 'mwnotebook[mlflow]'" in usage
    assert {p.pid for p in worker_processes()} == before  # nothing started
    assert notebook.value("len(mw_runs) if 'mw_runs' in globals() else 0") == 0  # not a run


def test_two_runs_read_back_by_tensorboard_and_mlflow_and_listed(notebook: Notebook, places: dict[str, Path]) -> None:
    from mlflow.tracking import MlflowClient

    tb = places["tb"]
    histories = []
    for lr in (0.05, 0.01):
        got = _fit(notebook, lr, options=f"--tensorboard {tb} --mlflow lr-search")
        assert "not recorded" not in got["stderr"], got["stderr"]
        histories.append(_histories(got["stdout"]))
        assert sorted(histories[-1]) == [0, 1]
    # each worker's own last values, as the notebook received them
    history = "get_ipython().magics_manager.registry['MWMagics'].session.runs"
    finals = {int(n): f for n, f in notebook.value(
        f"{{r.number: {{k: dict(v) for k, v in r.final.items()}} for r in {history}.records()}}").items()}
    assert sorted(finals) == [1, 2]  # the refused cell above is not a run

    folders = sorted(tb.iterdir(), key=lambda p: int(p.name.split("-")[1]))
    assert [f.name.split("-")[1] for f in folders] == ["1", "2"]
    for folder, history, number in zip(folders, histories, (1, 2)):
        assert sorted(p.name for p in folder.iterdir()) == ["global", "worker-0", "worker-1"]
        glob = _events(folder / "global")
        assert [s for s, _w, _v in glob["loss"]] == list(range(1, 19))
        # the global series ends at (and every epoch is) the value each worker's Keras history holds
        for worker in (0, 1):
            assert [v for _s, _w, v in glob["epoch_loss"]] == pytest.approx(history[worker]["loss"], rel=1e-5)
            assert glob["epoch_accuracy"][-1][2] == pytest.approx(history[worker]["accuracy"][-1], rel=1e-5)
            own = _events(folder / f"worker-{worker}")
            assert [s for s, _w, _v in own["loss"]] == list(range(1, 19))
            assert [s for s, _w, _v in own["epoch_loss"]] == [0, 1, 2]
            assert own["epoch_loss"][-1][2] == pytest.approx(finals[number][str(worker)]["loss"], rel=1e-5)
            assert all(w > 1.7e9 for _s, w, _v in own["loss"])  # the workers' wall times
        # the two workers' own losses differ (their shards): they are not the global copied
        assert _events(folder / "worker-0")["loss"] != _events(folder / "worker-1")["loss"]

    client = MlflowClient(tracking_uri=f"sqlite:///{places['mlflow']}")
    experiment = client.get_experiment_by_name("lr-search")
    found = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    assert len(found) == 2  # one MLflow run per training, not one per worker
    for run, history in zip(found, histories):
        assert run.info.status == "FINISHED"
        assert run.data.params["worker_count"] == "2" and run.data.params["workers"] == "2"
        assert run.data.params["mlflow"] == "lr-search" and len(run.data.params["cell_hash"]) == 16
        for worker in (0, 1):
            series = client.get_metric_history(run.info.run_id, f"worker-{worker}/loss")
            assert sorted(m.step for m in series) == list(range(1, 19))
        epochs = sorted(client.get_metric_history(run.info.run_id, "epoch_loss"), key=lambda m: m.step)
        assert [m.value for m in epochs] == pytest.approx(history[0]["loss"], rel=1e-5)
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert artifacts == {"cell.py", "tf_config.md"}
    cell = Path(client.download_artifacts(found[0].info.run_id, "cell.py", str(places["root"]))).read_text()
    assert "Adam(0.05)" in cell

    table = notebook.run("%mwruns")
    lines = [line for line in table["data"].splitlines() if re.match(r"^\d+\s", line)]
    assert [line.split()[0] for line in lines] == ["2", "1"]
    assert all(" ok " in line and "tensorboard, mlflow" in line for line in lines)
    diff = notebook.run("%mwruns --diff 1 2")["stdout"]
    assert "options: the same" in diff and "-    model.compile(optimizer=tf.keras.optimizers.Adam(0.05)" in diff


def test_a_users_own_tensorboard_callback_keeps_working(notebook: Notebook, places: dict[str, Path]) -> None:
    own = places["root"] / "user-tb"
    got = _fit(notebook, 0.05, callbacks=f", callbacks=[tf.keras.callbacks.TensorBoard(log_dir={str(own)!r})]")
    history = _histories(got["stdout"])[0]
    # TensorFlow's multi-worker rule: the chief writes log_dir, the others a temporary folder they remove
    assert sorted(p.name for p in own.iterdir()) == ["train"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(own / "train"))
    accumulator.Reload()
    values = [float(__import__("tensorflow").make_ndarray(e.tensor_proto)) for e in accumulator.Tensors("epoch_loss")]
    assert values == pytest.approx(history["loss"], rel=1e-5)


class _Refuses(http.server.BaseHTTPRequestHandler):
    def _no(self) -> None:
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error_code": "PERMISSION_DENIED", "message": "not allowed"}')

    do_GET = do_POST = _no

    def log_message(self, *args: Any) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_what_cannot_be_recorded_is_one_line_and_can_be_sent_again(notebook: Notebook, places: dict[str, Path]) -> None:
    blocker = places["root"] / "a-file"
    blocker.write_text("")
    refusing = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    threading.Thread(target=refusing.serve_forever, daemon=True).start()
    down = f"http://127.0.0.1:{_free_port()}"
    try:
        for uri, expect in ((down, "does not answer"), (f"http://127.0.0.1:{refusing.server_address[1]}", "PERMISSION_DENIED")):
            notebook.run(f"import os\nos.environ['MLFLOW_TRACKING_URI'] = {uri!r}")
            got = _fit(notebook, 0.05, options=f"--tensorboard {blocker / 'tb'} --mlflow refused")
            assert len(_histories(got["stdout"])) == 2  # the training ran
            missed = [line for line in got["stderr"].splitlines() if "not recorded" in line]
            assert len(missed) == 1, got["stderr"]
            number = int(re.search(r"run (\d+) was not recorded", missed[0]).group(1))
            assert "TensorBoard" in missed[0] and "NotADirectoryError" in missed[0]
            assert f"MLflow at {uri}" in missed[0] and expect in missed[0], missed[0]
            assert missed[0].endswith(f"%mwruns --log {number} --tensorboard {blocker / 'tb'} --mlflow refused")
    finally:
        refusing.shutdown()
        refusing.server_close()
        notebook.run(f"os.environ['MLFLOW_TRACKING_URI'] = {'sqlite:///' + str(places['mlflow'])!r}")
    # nothing measured is lost: the last run is sent again, now that both places work
    again = notebook.run(f"%mwruns --log {number} --tensorboard {places['root'] / 'tb-again'} --mlflow refused")
    assert f"run {number} recorded" in again["stdout"], again
    folder = next((places["root"] / "tb-again").iterdir())
    assert _events(folder / "worker-1")["epoch_loss"][-1][0] == 2
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{places['mlflow']}")
    runs = client.search_runs([client.get_experiment_by_name("refused").experiment_id])
    assert len(runs) == 1 and runs[0].data.tags["mwnotebook.run"] == str(number)
    assert "not recorded" not in notebook.run("%mwruns")["data"].split("\n")[1]


def test_a_failed_run_is_kept_and_marked_in_mlflow(notebook: Notebook, places: dict[str, Path]) -> None:
    got = notebook.run("%%mwtrain --workers 2 --cpu --mlflow failures\nimport os\n"
                       "if os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n    raise ValueError('bad lr')\n")
    assert "ValueError" in got["error"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{places['mlflow']}")
    runs = client.search_runs([client.get_experiment_by_name("failures").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FAILED"
    assert runs[0].data.tags["mwnotebook.outcome"] == "failed" and "bad lr" in runs[0].data.tags["mwnotebook.error"]
    assert "failed: worker 1 raised ValueError: bad lr" in notebook.run("%mwruns")["data"]


def test_an_interrupted_run_is_kept_as_interrupted(notebook: Notebook) -> None:
    done = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result.update(notebook.run("%%mwtrain --workers 2 --cpu\nimport time\nprint('sleeping', flush=True)\n"
                                   "time.sleep(60)"))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + 60  # a generous hang bound: the workers print within seconds
    while "sleeping" not in notebook.last_stdout and time.monotonic() < deadline:
        time.sleep(0.2)
    notebook.km.interrupt_kernel()  # the user's Ctrl-C
    assert done.wait(60), "the interrupted cell did not end"
    assert "ClusterInterrupted" in result["error"], result
    last = "get_ipython().magics_manager.registry['MWMagics'].session.runs.records()[-1]"
    assert notebook.value(f"[{last}.outcome, {last}.error]") == ["interrupted", ""]
    table = notebook.run("%mwruns")["data"]
    latest = next(line for line in table.splitlines() if re.match(r"^\d+\s", line))
    assert re.search(r"\s2\s+interrupted\s+--workers 2 --cpu", latest), latest


@pytest.mark.parametrize("line, says", [
    ("--diff 98 99", "%mwruns: no run 98 in this kernel's history (runs: "),
    ("--log 1", "%mwruns --log N: say where to: --tensorboard DIR and/or --mlflow [EXPERIMENT]"),
    ("--tensorboard somewhere", "%mwruns: --tensorboard and --mlflow go with --log N (which run to send)"),
    ("--log 1 --tensorboard ' '", "--tensorboard needs a directory"),
    ("--diff 1", "%mwruns: argument --diff: expected 2 arguments"),
])
def test_bad_mwruns_input_is_one_usage_line(notebook: Notebook, line: str, says: str) -> None:
    got = notebook.run(f"%mwruns {line}")
    assert got["stderr"].startswith("UsageError: ") and says in got["stderr"], got
    assert not got["stdout"] and not got["error"]


def test_a_restarted_kernel_lists_the_sessions_runs(notebook: Notebook, places: dict[str, Path]) -> None:
    before = notebook.run("%mwruns")["data"]
    numbers = [line.split()[0] for line in before.splitlines() if re.match(r"^\d+\s", line)]
    notebook.run("%mwcluster stop")
    notebook.restart()
    assert not notebook.run("%load_ext mwnotebook")["error"]
    after = notebook.run("%mwruns")["data"]
    assert [line.split()[0] for line in after.splitlines() if re.match(r"^\d+\s", line)] == numbers
    assert notebook.value("[int(n) for n in mw_runs.index]") == [int(n) for n in numbers]
    store = next((places["runtime"] / "mwnotebook").glob("runs-*"))
    assert oct(store.stat().st_mode & 0o777) == "0o700"
    assert {oct(p.stat().st_mode & 0o777) for p in store.iterdir()} == {"0o600"}


@pytest.mark.parametrize("outcome, restarts, status", [("ok", 1, "FINISHED"), ("interrupted", 0, "KILLED")])
def test_restarted_and_interrupted_runs_are_marked_in_mlflow(places: dict[str, Path], outcome: str, restarts: int,
                                                             status: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The MLflow writer on its own (this process, the module's sqlite store): what a run's end says."""
    from mlflow.tracking import MlflowClient

    from mwnotebook.experiments import mlflow_log
    from mwnotebook.experiments.history import RunHistory

    uri = f"sqlite:///{places['mlflow']}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    record = RunHistory().record(line="--workers 2 --max-restarts 1", cell="fit()", started=1.8e9, duration=3.0,
                                 workers=2, outcome=outcome, restarts=restarts,  # type: ignore[arg-type]
                                 metrics=[{"worker": 0, "step": 1, "time": 1.8e9, "loss": 0.5}],
                                 options={"workers": "2", "max_restarts": "1"})
    run = MlflowClient(tracking_uri=uri).get_run(mlflow_log.log_run(record, [], f"marks-{outcome}"))
    assert run.info.status == status
    assert run.data.tags["mwnotebook.restarted"] == ("true" if restarts else "false")
    assert run.data.tags["mwnotebook.restarts"] == str(restarts)
    assert run.data.params["max_restarts"] == "1"
