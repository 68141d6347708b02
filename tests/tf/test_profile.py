"""``%%mwtrain --profile DIR`` and ``%mwprofile`` on two real MultiWorkerMirroredStrategy workers (the
shared ``tf_cluster`` of tests/tf/conftest.py, reached through the magics of an in-process IPython
shell whose cell line asks for the same cluster): each worker's trace lands where TensorBoard's
profile plugin (xprof, the test extra's tensorboard-plugin-profile) finds it and is read by the
plugin itself, one host per worker; the end of the cell splits each worker's traced steps into
input, compute and collective and names the input-bound one; a window past the run's steps is a line
at the end; a folder that cannot be written is refused before anything starts. ~25 s on 2 loaded cores."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from mwnotebook.errors import ClusterRunError, ConfigError
from mwnotebook.experiments.profile import ProfileRequest, run_name
from mwnotebook.frontend.notebook.magics import MWMagics

pytestmark = pytest.mark.tf

#: The cell line that asks for the shared cluster's options (tests/tf/conftest.py tf_cluster).
LINE = "--workers 2 --cpu --preload --no-dashboard"

FIT = r'''
import time
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw

SLEEP = SLEEP_S if mw.task_index() == 1 else 0.0
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")

def slow(a, b):
    def nap(t):
        time.sleep(SLEEP)
        return t
    return tf.reshape(tf.py_function(nap, [a], tf.float32), [-1, 8]), b

data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16).map(slow)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(data, epochs=1, steps_per_epoch=STEPS, verbose=0);
'''


def fit(sleep: float, steps: int) -> str:
    return FIT.replace("SLEEP_S", repr(sleep)).replace("STEPS", str(steps))


@pytest.fixture(scope="module")
def magics(tf_cluster: Any) -> Iterator[MWMagics]:
    """The magics of an in-process shell, their session holding the shared cluster (never stopped here)."""
    shell = InteractiveShell.instance()
    magics = MWMagics(shell)
    shell.register_magics(magics)
    magics.session.cluster = tf_cluster
    yield magics
    magics.session.cluster = None  # the shared cluster stays for the other modules


def profiled(magics: MWMagics, line: str, cell: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run a profiled cell; again (up to 4 times) when TensorFlow's profiler crashed a worker as it
    stopped, the known crash of plain TensorFlow processes too (docs/guide/profiling.md: about one stop
    in six for short traces here), which the cell survives with its summary lost. Returns the output of
    the run kept."""
    for _ in range(4):
        magics.shell.run_cell_magic("mwtrain", line, cell)
        out = capsys.readouterr().out
        summary = magics.session.last_profile
        if summary is None or not summary.lost:
            return out
    raise AssertionError(f"the profile was lost four times running: {out}")


def profile_plugin(logdir: Path) -> Any:
    """TensorBoard's profile plugin (xprof) on ``logdir``, as ``tensorboard --logdir`` makes it."""
    from tensorboard.plugins.base_plugin import TBContext
    from xprof.profile_plugin import ProfilePlugin

    flags = argparse.Namespace(master_tpu_unsecure_channel="")
    return ProfilePlugin(TBContext(logdir=str(logdir), flags=flags, data_provider=None))


def tool_data(plugin: Any, run: str, host: str, tool: str) -> bytes:
    """What the Profile tab's ``/data`` request gets for one host."""
    from werkzeug.test import EnvironBuilder
    from werkzeug.wrappers import Request

    query = {"run": run, "tag": tool, "host": host}
    data, _content_type, _encoding = plugin.data_impl(Request(EnvironBuilder(path="/data", query_string=query)
                                                              .get_environ()))
    return data if isinstance(data, bytes) else str(data).encode()


def test_every_worker_leaves_a_trace_the_profile_plugin_reads(magics: MWMagics, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    logdir = tmp_path / "profiles"
    out = profiled(magics, f"{LINE} --profile {logdir}", fit(0.06, 14), capsys)
    summary = magics.session.last_profile
    assert summary is not None, out
    assert [w.traced for w in summary.workers] == [(6, 7, 8, 9, 10)] * 2, out  # the same steps on both
    assert sorted(Path(t).name for t in summary.traces()) == ["worker0.xplane.pb", "worker1.xplane.pb"], out

    plugin = profile_plugin(logdir)
    assert summary.run in plugin.runs_imp()
    hosts = {h["hostname"] for h in plugin.host_impl(summary.run, "framework_op_stats")}
    assert {"worker0", "worker1"} <= hosts, hosts
    for host in ("worker0", "worker1"):
        ops = tool_data(plugin, summary.run, host, "framework_op_stats")
        assert b"MatMul" in ops and b"Collective" in ops, ops[:500]  # the model's layer and the all-reduce

    # the summary's numbers: worker 1 waits ~60 ms per batch for input (30 ms was measured hidden to 8.8 ms
    # behind a 27 ms collective on a loaded CI machine), worker 0 waits for it in the collective
    slow, even = summary.workers[1], summary.workers[0]
    assert slow.input is not None and slow.input > 0.01 and slow.input_bound, out  # 60 ms, in part prefetched
    assert even.input is not None and not even.input_bound and even.collective is not None and even.collective > 0.015
    for w in summary.workers:
        assert w.step == pytest.approx((w.input or 0) + (w.compute or 0) + (w.collective or 0), abs=1e-6)
    assert "mwnotebook: worker 1 is the slow worker, input-bound" in out, out
    assert f"mwnotebook: traces from step 6 to the cell's end in {logdir.absolute() / 'plugins/profile' / summary.run}" \
        in out, out
    assert "mwnotebook: worker 1, steps 6-10: " in out and "INPUT BOUND (rule: < 5 %)" in out, out
    assert "-> build the pipeline with mwnotebook.recipes.input_pipeline" in out, out  # the checklist's advice
    assert "[ ] XLA: off" in out, out


def test_mwprofile_and_a_window_past_the_runs_steps(magics: MWMagics, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    logdir = tmp_path / "later"
    magics.shell.run_line_magic("mwprofile", f"{logdir} --steps 20:25")
    magics.shell.run_cell_magic("mwtrain", LINE, fit(0.0, 8))  # %mwprofile's setting: no option on the line
    out = capsys.readouterr().out
    assert "mwnotebook: nothing traced: the run had 8 steps, the window starts at step 20; give " \
           "--profile-steps within the run (e.g. 4:8)" in out, out
    assert not list(logdir.glob("plugins/profile/*/*.xplane.pb"))

    magics.shell.run_line_magic("mwprofile", f"{logdir} --steps 6:12")
    out = profiled(magics, LINE, fit(0.0, 8), capsys)
    assert "mwnotebook: the run had 8 steps, fewer than the window's 12: only steps 6-8 traced" in out, out
    summary = magics.session.last_profile
    assert summary is not None and len(summary.traces()) == 2, out  # the part traced is kept

    magics.shell.run_cell_magic("mwtrain", f"{LINE} --profile-steps 3:5", fit(0.0, 8))  # the split, no profiler
    out = capsys.readouterr().out
    summary = magics.session.last_profile
    assert summary is not None and not summary.traces() and [w.traced for w in summary.workers] == [(3, 4, 5)] * 2
    assert "mwnotebook: worker 1, steps 3-5: " in out and "mwnotebook: traces" not in out, out

    magics.shell.run_line_magic("mwprofile", "off")
    magics.shell.run_cell_magic("mwtrain", LINE, "print('plain')")  # no profiler left running, no summary
    out = capsys.readouterr().out
    assert "plain" in out and "mwnotebook: traces" not in out and "traced" not in out, out
    magics.shell.run_line_magic("mwprofile", "")
    out = capsys.readouterr().out
    assert "profiling is off" in out and "mwnotebook: worker 1, steps 3-5: " in out, out  # the last summary again


def test_a_folder_that_cannot_be_written_is_refused_before_anything_starts(tmp_path: Path, tf_cluster: Any) -> None:
    shell = InteractiveShell.instance()
    fresh = MWMagics(shell)  # a session with no cluster: it must stay so
    shell.register_magics(fresh)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(UsageError, match="--profile .*a-file/traces: cannot write there"):
        shell.run_cell_magic("mwtrain", f"{LINE} --profile {blocker}/traces", fit(0.0, 8))
    with pytest.raises(UsageError, match="cannot write there"):
        shell.run_line_magic("mwprofile", f"{blocker}/traces")
    with pytest.raises(UsageError, match="--profile-steps 9:3: the first step must be >= 1 and the last >= the first"):
        shell.run_cell_magic("mwtrain", f"{LINE} --profile {tmp_path} --profile-steps 9:3", "pass")
    assert fresh.session.cluster is None and fresh.session.profile is None
    with pytest.raises(ConfigError, match="cannot write there"):
        ProfileRequest.of(blocker / "traces").check()

    # A worker that cannot write there (a remote host's folder): the arming step fails, naming it,
    # before the cell runs.
    with pytest.raises(ClusterRunError, match="this worker cannot write its trace into"):
        tf_cluster.run(ProfileRequest.of(blocker / "traces").arm_code(run_name()), timeout=120)
    assert tf_cluster.run("print('next')", timeout=120).ok
