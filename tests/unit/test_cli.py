"""The ``mwnotebook`` command without kernels: help, usage errors, export, live labelling, report."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mwnotebook.errors import WorkerError, WorkerFailure
from mwnotebook.frontend.cli.command import main
from mwnotebook.frontend.cli.run_observer import RunObserver, describe_failure
from mwnotebook.frontend.cli.run_report import render_report
from mwnotebook.shared.events import WorkerMetrics, WorkerOutput, WorkerStateChanged

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_train.py"


def help_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_reads_like_a_cli(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(capsys)
    assert text.startswith("usage: mwnotebook ")
    for phrase in ["run ", "export ", "examples:", "mwnotebook run --workers 2 --cpu train.py",
                   "exit status:", "130"]:
        assert phrase in text, phrase


def test_run_help_lists_options_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(capsys, "run")
    for phrase in ["--workers N", "--cpu", "--env KEY=VALUE", "--timeout S", "--report FILE", "SCRIPT",
                   "examples:", "[worker i]"]:
        assert phrase in text, phrase


def test_console_script_is_installed_and_answers_help() -> None:
    exe = shutil.which("mwnotebook")
    if exe is None:
        pytest.skip("the package is not installed with its console script (pip install -e .)")
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage: mwnotebook" in proc.stdout


@pytest.mark.parametrize("argv", [
    ["run"],                                    # no script
    ["run", "--workers", "0", "x.py"],          # bad count
    ["run", "--env", "NOEQUALS", "x.py"],       # bad --env
    ["export", "x.py"],                         # --out missing
    ["frobnicate"],                             # unknown command
])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_missing_script_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "nope.py")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_export_command_writes_the_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "job"
    assert main(["export", "--workers", "3", "--cpu", "--ports", "12345,23456,34567", "--out", str(out),
                 str(SEED)]) == 0
    assert "run-local.sh" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", "run-local.sh", "train.py", "worker-0.sh", "worker-1.sh", "worker-2.sh"]
    line = (out / "worker-2.sh").read_text().splitlines()[-1]
    assert " CUDA_VISIBLE_DEVICES=-1 " in line
    assert line.endswith("exec python3 train.py")
    config = json.loads(line.split("TF_CONFIG='")[1].split("'")[0])
    assert config == {"cluster": {"worker": ["127.0.0.1:12345", "127.0.0.1:23456", "127.0.0.1:34567"]},
                      "task": {"type": "worker", "index": 2}}


def test_export_config_error_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "-n", "2", "--ports", "5000,5000", "--out", str(tmp_path), str(SEED)])
    assert exit_info.value.code == 2
    assert "same host:port" in capsys.readouterr().err


def stream(worker: int, text: str, name: str = "stdout") -> WorkerOutput:
    return WorkerOutput(worker=worker, msg_type="stream", content={"name": name, "text": text})


def test_observer_labels_every_line_and_holds_partial_lines() -> None:
    out, err = io.StringIO(), io.StringIO()
    observer = RunObserver(2, out, err)
    observer(stream(0, "epoch 1\nepo"))
    observer(stream(1, "hello from 1\n"))
    observer(stream(1, "oops\n", "stderr"))
    observer(stream(0, "ch 2\n"))
    observer(stream(1, "no newline"))
    observer.flush()
    assert out.getvalue().splitlines() == ["[worker 0] epoch 1", "[worker 1] hello from 1", "[worker 0] epoch 2",
                                           "[worker 1] no newline"]
    assert err.getvalue() == "[worker 1] oops\n"


def test_observer_labels_the_kernels_it_is_told_the_names_of() -> None:
    out = io.StringIO()
    observer = RunObserver(3, out, io.StringIO(), names={2: "evaluator"})
    observer(stream(2, "eval\n"))
    observer(stream(0, "train\n"))
    assert out.getvalue().splitlines() == ["[evaluator] eval", "[worker 0] train"]
    assert observer.output[2] == ["eval\n"]


def failing_run() -> WorkerError:
    tb = ["\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
          "\x1b[0;31mValueError\x1b[0m  Traceback (most recent call last)\nCell In[2], line 12\n"
          "\x1b[0;32m---> 12\x1b[0m     raise ValueError('boom')",
          "\x1b[0;31mValueError\x1b[0m: boom"]
    return WorkerError([WorkerFailure(1, "error", ename="ValueError", evalue="boom", traceback=tb),
                        WorkerFailure(0, "interrupted")], restarted=True)


def test_failure_names_the_worker_and_its_traceback_first() -> None:
    text = describe_failure(failing_run())
    lines = text.splitlines()
    assert lines[0] == "mwnotebook: worker 1 raised ValueError: boom"
    assert "[worker 1] ---> 12     raise ValueError('boom')" in lines
    assert lines[-1] == "mwnotebook: worker 0 was interrupted"
    assert "\x1b" not in text
    assert "\x1b[0;31m" in describe_failure(failing_run(), keep_color=True)


def observed_run(with_metrics: bool) -> RunObserver:
    observer = RunObserver(2, io.StringIO(), io.StringIO())
    for i in range(2):
        observer(WorkerStateChanged(i, "running"))
        observer(stream(i, f"worker {i} <says> hi\n"))
        if with_metrics:
            records = tuple({"step": s, "loss": 1.0 / (s + 1) + i, "global_loss": 0.5} for s in range(5))
            observer(WorkerMetrics(i, records))
        observer(WorkerStateChanged(i, "done"))
        observer(WorkerStateChanged(i, "starting"))  # a restart after the run must not hide the verdict
    return observer


def test_report_without_metrics_says_so_and_lists_status_and_output() -> None:
    page = render_report("train.py", observed_run(False), "all workers succeeded", 3.2)
    assert "No metrics were reported" in page
    assert page.count("class='done'>done<") == 2
    assert "worker 1 &lt;says&gt; hi" in page  # output is escaped
    assert "plotly" not in page.lower()


def test_report_with_metrics_has_one_curve_per_worker_plus_global() -> None:
    page = render_report("train.py", observed_run(True), "all workers succeeded", 3.2)
    assert "No metrics were reported" not in page
    # the dashboard's figure (dashboard.per_worker_figure), drawn once for the report
    for name in ("worker 0 (local loss)", "worker 1 (local loss)", "global loss (all workers)"):
        assert f'"name":"{name}"' in page, name
    assert page.count("Plotly.newPlot") == 1  # one figure: loss (global_loss drawn on it)


def test_report_calls_each_kernel_by_the_name_handed_down() -> None:
    """A --ps cluster with an evaluator: kernel 0 is the coordinator, kernel 1 the evaluator (the
    names the command hands the observer, config/roles.py RoleLayout.kernel_names); the report's
    sections, table and legend say so, as the run's text does, and not "worker 0"."""
    names = {0: "coordinator", 1: "evaluator"}
    observer = RunObserver(3, io.StringIO(), io.StringIO(), names=names)
    for i in range(3):
        observer(WorkerStateChanged(i, "running"))
        observer(stream(i, f"kernel {i} says hi\n"))
        observer(WorkerMetrics(i, tuple({"step": s, "loss": 1.0 / (s + 1) + i} for s in range(3))))
        observer(WorkerStateChanged(i, "done"))
    page = render_report("train.py", observer, "all workers succeeded", 3.2)
    for who in ("coordinator", "evaluator", "worker 2"):
        assert f"<summary>{who} output</summary>" in page and f"<tr><td>{who}</td>" in page, who
    assert "<summary>worker 0 output" not in page and "<summary>worker 1 output" not in page
    for name in ("coordinator (loss)", "evaluator (loss)", "worker 2 (local loss)"):
        assert f'"name":"{name}"' in page, name


def test_report_shows_failures() -> None:
    observer = observed_run(False)
    error = failing_run()
    observer.record_failures(error)
    page = render_report("train.py", observer, "failed", 3.2, describe_failure(error))
    assert "class='failed'>failed<" in page and "class='interrupted'>interrupted<" in page
    assert "worker 1 raised ValueError: boom" in page
