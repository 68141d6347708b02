"""The magics in a real (in-process) IPython shell with real worker kernels, no TensorFlow."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from testbed.processes import WORKER_MODULES, wait_gone, worker_processes

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("line, cell", [
    ("--workers 0", "print(1)"), ("--workers -1", "print(1)"), ("--workers abc", "print(1)"),
    ("--workers 2.5", "print(1)"), ("--workers 9999", "print(1)"), ("--bogus", "print(1)"),
    ("--workers 2", "   \n"), ("--env TF_CONFIG={}", "print(1)"), ("--cpu --gpus-per-worker 2", "print(1)"),
])
def test_bad_input_raises_usage_error_and_starts_nothing(shell, line, cell):
    before = {p.pid for p in worker_processes()}
    with pytest.raises(UsageError):
        shell.run_cell_magic("mwtrain", line, cell)
    assert {p.pid for p in worker_processes()} == before


def test_help_is_available(shell):
    doc = shell.find_cell_magic("mwtrain").__doc__
    assert "--workers" in doc and "--timeout" in doc


def test_cells_run_labelled_and_reuse_workers(shell, capsys):
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", "import os\nprint('hi', os.environ['MWNOTEBOOK_WORKER_INDEX'])")
    out = capsys.readouterr()
    assert "[worker 0] hi 0" in out.out and "[worker 1] hi 1" in out.out
    assert "no authentication" in out.out  # the one-time security notice
    assert "unreachable from other machines" in out.out  # root here: TF ports in a private namespace
    first = shell.run_line_magic("mwcluster", "status")
    pids = {p.pid for p in worker_processes()}
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", "print('again')")
    out = capsys.readouterr()
    assert "[worker 1] again" in out.out and "no authentication" not in out.out + out.err
    assert {p.pid for p in worker_processes()} == pids  # same processes: reused
    shell.run_cell_magic("mwtrain", "--workers 3 --no-dashboard", "print('three')")
    out = capsys.readouterr()
    assert "[worker 2] three" in out.out
    assert not pids & {p.pid for p in worker_processes()}  # other topology: new processes
    assert first is None


def test_failure_shows_the_failing_worker_first(shell, capsys):
    from mwnotebook import WorkerError

    code = "import os, time\nif os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n    1/0\ntime.sleep(30)"
    with pytest.raises(WorkerError) as info:
        shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", code)
    rendered = info.value._render_traceback_()
    assert "[worker 1] worker 1 raised ZeroDivisionError" in rendered[0]
    assert any("ZeroDivisionError" in line for line in rendered[1:])
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", "print('fine')")
    assert "[worker 0] fine" in capsys.readouterr().out


def test_stop_ends_the_workers(shell, capsys):
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", "pass")
    pids = {p.pid for p in worker_processes()}
    shell.run_line_magic("mwcluster", "stop")
    assert not wait_gone(pids, 5, WORKER_MODULES)[0]
    shell.run_line_magic("mwcluster", "status")
    assert "no cluster is running" in capsys.readouterr().out


def test_background_start_returns_at_once_and_the_next_cell_uses_it(shell, capsys):

    shell.run_line_magic("mwcluster", "stop")
    shell.run_line_magic("mwcluster", "start --workers 2 --preload")
    # "At once" is checked by state, not by a stopwatch: the magic returned while the start was
    # still under way (a start takes seconds: kernels to launch and answer).
    cluster = shell.magics_manager.registry["MWMagics"].session.cluster
    assert cluster is not None and not cluster.started
    assert "in the background" in capsys.readouterr().out
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", "print('warm')")
    pids = {p.pid for p in worker_processes()}
    assert "[worker 1] warm" in capsys.readouterr().out
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", "print('again')")
    assert {p.pid for p in worker_processes()} == pids


def test_the_result_is_plain_data_in_the_notebook_after_the_cell(shell):
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard",
                         "import mwnotebook.worker as mw\nfor s in range(3):\n    mw.report(step=s, loss=1.0 / (s + 1))")
    result = shell.user_ns["mw_result"]
    losses = sorted((r["worker"], r["step"], r["loss"]) for r in result.metrics)
    assert losses == [(w, s, 1.0 / (s + 1)) for w in (0, 1) for s in range(3)]
    frame = result.metrics_frame()
    assert len(frame) == 6 and set(frame["worker"]) == {0, 1}
