"""Fault injection on real two-worker TensorFlow clusters (the table: benchmarks/reliability_table.md).

Every scenario records one row -- scenario, limit, seconds to detection, seconds until the cell
failed, whether the next cell succeeded, orphan processes left -- with ``record``
(tests/_plugins/reliability_table.py) *before* it asserts. Faults come only from outside mwnotebook:
signals sent by the test, cells that raise or hang.
"""

from __future__ import annotations

import os
import pathlib
import queue
import re
import threading
import time
from typing import Any

import psutil
import pytest

from testbed.modules import require

from .._plugins.reliability_table import record  # noqa: F401 (the scenarios import it from here)

require("tensorflow", "pip install -e '.[tensorflow-cpu]'")

from mwnotebook.shared.events import WorkerStateChanged  # noqa: E402 (after the optional-import check)

from ..conftest import alive_workers, is_worker  # noqa: E402 (after the optional-import check)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
HERE = pathlib.Path(__file__).resolve().parent
SEED_LINE = "worker={i} replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281"
#: Processes mwnotebook starts: worker kernels and the holders of private network namespaces.
MW_MODULES = ("mwnotebook.processes.worker_kernel", "mwnotebook.processes.netns_holder",
              "mwnotebook.processes.worker_template")
WORKER_KERNELS = ("mwnotebook.processes.worker_kernel",)
#: What one cluster starts and must end when it stops. The worker template (in MW_MODULES) is not
#: one cluster's: it serves every cluster of its process and ends with that process.
CLUSTER_MODULES = ("mwnotebook.processes.worker_kernel", "mwnotebook.processes.netns_holder")

#: A tf_keras ``fit`` that would run for hours; each worker drops a stamp file at batch 5 (training is
#: really under way), and ``{fault}`` runs in the same callback.
LONG_FIT = '''
import os, time
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = int(os.environ["MWNOTEBOOK_WORKER_INDEX"])
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="binary_crossentropy")

class Fault(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 5:
            open({stamp!r} + "." + str(index), "w").write(repr(time.time()))
{fault}

model.fit(ds, epochs=1, steps_per_epoch=10_000_000, verbose=0, callbacks=[Fault()])
'''


# ----------------------------------------------------------------------------- markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.reliability)


# ----------------------------------------------------------------------------- processes
def is_mw_process(proc: psutil.Process, modules: tuple[str, ...] = MW_MODULES) -> bool:
    return is_worker(proc, modules)


def mw_descendants(pid: int | None = None, modules: tuple[str, ...] = CLUSTER_MODULES) -> set[int]:
    """mwnotebook worker kernels and namespace holders below ``pid`` (default: this process);
    ``modules=MW_MODULES`` adds the worker templates."""
    try:
        root = psutil.Process(pid) if pid else psutil.Process()
        return {p.pid for p in root.children(recursive=True) if is_mw_process(p, modules)}
    except psutil.NoSuchProcess:
        return set()


def alive_mw(pids: set[int]) -> set[int]:
    """Worker kernels and namespace holders among ``pids`` that are still alive."""
    return alive_workers(pids, MW_MODULES)


def wait_gone(pids: set[int], timeout: float) -> tuple[set[int], float]:
    """Wait until none of ``pids`` is a live mwnotebook process: (still alive, seconds waited)."""
    started = time.monotonic()
    alive = alive_mw(pids)
    while alive and time.monotonic() - started < timeout:
        time.sleep(0.05)
        alive = alive_mw(alive)
    return alive, time.monotonic() - started


def kill_all(pids: set[int]) -> None:
    """Last-resort clean-up of processes a failed scenario left behind (ours only, by pid)."""
    for pid in alive_mw(pids):
        try:
            os.kill(pid, 18)  # SIGCONT first: a stopped process must not stay stopped
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def wait_for_file(path: pathlib.Path, timeout: float, while_running: CellThread | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if while_running is not None and while_running.done:
            raise AssertionError(f"the cell ended before {path.name} appeared: {while_running.error!r}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} did not appear within {timeout} s")
        time.sleep(0.05)


# ----------------------------------------------------------------------------- running cells
class CellThread:
    """``Cluster.run`` in a background thread, so the test can inject a fault while it runs.

    Records when the first worker was reported ``failed`` and when the call returned or raised.
    """

    def __init__(self, cluster: Any, code: str, timeout: float | None = None) -> None:
        self.cluster = cluster
        self.code = code
        self.timeout = timeout
        self.started_at = time.monotonic()
        self.first_failure_at: float | None = None
        self.first_failure_wall: float | None = None  # time.time(), to compare with stamps from workers
        self.ended_at: float | None = None
        self.ended_wall: float | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="reliability-cell", daemon=True)
        self._thread.start()

    def _on_event(self, event: Any) -> None:
        if isinstance(event, WorkerStateChanged) and event.state == "failed" and self.first_failure_at is None:
            self.first_failure_at = time.monotonic()
            self.first_failure_wall = time.time()

    def _run(self) -> None:
        try:
            self.result = self.cluster.run(self.code, on_event=self._on_event, timeout=self.timeout)
        except BaseException as exc:  # ClusterInterrupted is a KeyboardInterrupt
            self.error = exc
        finally:
            self.ended_wall = time.time()
            self.ended_at = time.monotonic()

    @property
    def done(self) -> bool:
        return self.ended_at is not None

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the cell was still running after {timeout} s"

    def since(self, t0: float) -> tuple[float | None, float | None]:
        """(seconds to detection, seconds to failure) counted from ``t0``."""
        detected = None if self.first_failure_at is None else max(0.0, self.first_failure_at - t0)
        failed = None if self.ended_at is None else self.ended_at - t0
        return detected, failed


@pytest.fixture(scope="session")
def seed_code() -> str:
    return (DATA / "seed_train.py").read_text()


def seed_lines_ok(text_by_worker: list[str]) -> bool:
    return all(SEED_LINE.format(i=i) in text for i, text in enumerate(text_by_worker))


# ----------------------------------------------------------------------------- notebook kernels
class Notebook:
    """A real notebook kernel (python3, via jupyter_client), the way a Jupyter front end drives one."""

    def __init__(self) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(ROOT), env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self._iopub: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid  # type: ignore[union-attr]

    def submit(self, code: str) -> str:
        return self.kc.execute(code, allow_stdin=False, stop_on_error=False)

    def collect(self, msg_id: str, timeout: float) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
        """Wait for the cell to finish: (execute_reply message, stream text, all its output messages)."""
        deadline = time.monotonic() + timeout
        outputs: list[dict[str, Any]] = []
        idle = False
        while not idle:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = [(m["msg_type"], str(m["content"].get("text") or m["content"].get("ename") or "")[-300:])
                        for m in outputs[-8:]]
                procs = {p.pid: (p.status(), p.cmdline()[1:3]) for p in psutil.Process(self.pid).children(True)}
                raise AssertionError(f"the notebook cell did not finish within {timeout} s; last outputs "
                                     f"{seen}; kernel's children {procs}")
            try:
                msg = self.kc.get_iopub_msg(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
            elif msg["msg_type"] in ("stream", "error", "display_data", "execute_result"):
                outputs.append(msg)
        while True:
            reply = self.kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                break
        text = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
        return reply, text, outputs

    def execute(self, code: str, timeout: float = 240) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
        return self.collect(self.submit(code), timeout)

    def workers(self, modules: tuple[str, ...] = MW_MODULES) -> set[int]:
        """The notebook's mwnotebook processes (by default worker kernels and namespace holders)."""
        return mw_descendants(self.pid, modules) if self.km.is_alive() else set()

    def close(self) -> None:
        """Stop the notebook's cluster, then the kernel; kill whatever it left (by pid)."""
        pids = self.workers()
        try:
            if self.km.is_alive():
                self.execute("%mwcluster stop", timeout=30)
        except Exception:  # clean-up goes on
            pass
        self.kc.stop_channels()
        try:
            if self.km.is_alive():
                self.km.shutdown_kernel(now=True)
            else:  # killed by the test: only its files are left to remove
                self.km.cleanup_resources()
        except Exception:
            pass
        left, _ = wait_gone(pids, timeout=10)
        kill_all(left)


def _notebooks():
    made: list[Notebook] = []

    def make() -> Notebook:
        nb = Notebook()
        made.append(nb)
        reply, _, _ = nb.execute("%load_ext mwnotebook", timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
        return nb

    yield make
    for nb in made:
        nb.close()


@pytest.fixture
def notebook_factory():
    """Fresh notebook kernels with mwnotebook loaded, closed (and their workers checked) at the end."""
    yield from _notebooks()


@pytest.fixture(scope="module")
def shared_notebook():
    """One notebook kernel that several scenarios of a module use in turn."""
    for make in _notebooks():
        yield make()


def worker_lines(text: str) -> list[str]:
    """The seed's result lines as the notebook shows them (labelled), in order."""
    return re.findall(r"^\[worker \d\] worker=\d replicas=.*$", text, re.M)
