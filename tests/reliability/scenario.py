"""What the reliability scenarios share besides fixtures: the long ``fit`` a fault interrupts
(:data:`LONG_FIT`), ``Cluster.run`` in a thread that notes when a worker was first reported failed
(:class:`CellThread`), waiting for a stamp file while the cell runs, and reading the seed's lines.
"""

from __future__ import annotations

import pathlib
import re
import threading
import time
from typing import Any

from mwnotebook.shared.events import WorkerStateChanged
from testbed.seed_cell import expected_line

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"

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


def wait_for_file(path: pathlib.Path, timeout: float, while_running: CellThread | None = None) -> None:
    """Until ``path`` exists (a worker's stamp); fails at once if the cell ended first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if while_running is not None and while_running.done:
            raise AssertionError(f"the cell ended before {path.name} appeared: {while_running.error!r}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} did not appear within {timeout} s")
        time.sleep(0.05)


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


def seed_lines_ok(text_by_worker: list[str]) -> bool:
    return all(expected_line(i) in text for i, text in enumerate(text_by_worker))


def worker_lines(text: str) -> list[str]:
    """The seed's result lines as the notebook shows them (labelled), in order."""
    return re.findall(r"^\[worker \d\] worker=\d replicas=.*$", text, re.M)
