"""The ``mwnotebook run`` command on real worker kernels: the seed script, a failing worker, Ctrl-C,
and the HTML report. Every test checks that no process started by the command outlives it."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from html.parser import HTMLParser
from pathlib import Path

import psutil
import pytest

from mwnotebook.shared.events import METRICS_MIME

DATA = Path(__file__).resolve().parents[1] / "data"
SEED_LINE = "[worker {i}] worker={i} replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281"
PR_SET_CHILD_SUBREAPER = 36


class CommandRun:
    """``mwnotebook ...`` as a child process, its output read live (with the time each line came)
    and every descendant process it ever had recorded."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        env = dict(os.environ)
        env.pop("TF_CONFIG", None)
        # Processes this test process already had (a session-wide cluster of other tests) are not the command's.
        self.preexisting = {p.pid for p in psutil.Process().children(recursive=True)}
        self.proc = subprocess.Popen([sys.executable, "-m", "mwnotebook.frontend.cli.command", *args], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.stdout: list[tuple[float, str]] = []
        self.stderr: list[tuple[float, str]] = []
        self.descendants: dict[int, str] = {}
        self.ended_at: float | None = None
        self._threads = [threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr), daemon=True),
                         threading.Thread(target=self._watch, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _read(self, stream, sink: list[tuple[float, str]]) -> None:
        for line in stream:
            sink.append((time.monotonic(), line.rstrip("\n")))

    def _watch(self) -> None:
        try:
            parent = psutil.Process(self.proc.pid)
        except psutil.NoSuchProcess:
            return
        while self.proc.poll() is None:
            try:
                for child in parent.children(recursive=True):
                    self.descendants.setdefault(child.pid, " ".join(child.cmdline()[:4]))
            except psutil.Error:
                pass
            time.sleep(0.05)

    def wait_for_line(self, text: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for when, line in list(self.stdout) + list(self.stderr):
                if text in line:
                    return when
            if self.proc.poll() is not None and not any(t.is_alive() for t in self._threads[:2]):
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} never appeared; output:\n{self.text()}")

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.ended_at = time.monotonic()
        for thread in self._threads:
            thread.join(timeout=5)
        return code

    def out(self) -> list[str]:
        return [line for _, line in self.stdout]

    def err(self) -> list[str]:
        return [line for _, line in self.stderr]

    def text(self) -> str:
        return "\n".join(self.out()) + "\n--- stderr ---\n" + "\n".join(self.err())

    def assert_nothing_left(self) -> None:
        """No process the command started is still running (grace for the last SIGKILLs to land)."""
        assert self.descendants, "the command started no process at all?"
        deadline = time.monotonic() + 3
        while True:
            alive = {pid: cmd for pid, cmd in self.descendants.items() if _alive(pid)}
            alive.update({p.pid: " ".join(p.cmdline()[:4]) for p in _own_orphans() if p.pid not in self.preexisting})
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert not alive, f"processes left behind by the command: {alive}"


def external_resources(page: str) -> list[str]:
    """``src``/``href`` of script, link and img tags that point outside the file."""
    found: list[str] = []

    class Finder(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            for name, value in attrs:
                if tag in ("script", "link", "img") and name in ("src", "href") and value \
                        and not value.startswith("data:"):
                    found.append(value)

    Finder().feed(page)
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _own_orphans() -> list[psutil.Process]:
    """Python processes re-parented to this test process (it is a child subreaper, see fixture)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
            elif "python" in child.name().lower() or any("python" in part for part in child.cmdline()[:1]):
                found.append(child)
        except (psutil.Error, ChildProcessError):
            continue
    return found


@pytest.fixture(autouse=True)
def subreaper():
    """Make this process the reaper of orphans, so a worker that outlives the command is found."""
    libc = ctypes.CDLL(None, use_errno=True)
    ok = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    yield ok
    if ok:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


@pytest.mark.tf
def test_run_seed_script_prints_both_result_lines_and_exits_0(tmp_path: Path) -> None:
    run = CommandRun(["run", "--workers", "2", "--cpu", str(DATA / "seed_train.py")], cwd=tmp_path)
    code = run.wait(timeout=300)
    assert code == 0, run.text()
    for i in range(2):
        assert SEED_LINE.format(i=i) in run.out(), run.text()
    report = (tmp_path / "seed_train-report.html").read_text()
    assert "No metrics were reported" in report
    assert report.count("class='done'>done<") == 2
    assert "worker=1 replicas=2 initial_loss=0.7459" in report
    run.assert_nothing_left()


@pytest.mark.tf
def test_worker_1_failing_while_worker_0_blocks_exits_1_quickly_and_cleanly(tmp_path: Path) -> None:
    run = CommandRun(["run", "-n", "2", "--cpu", "--report", "failed.html", str(DATA / "fail_on_worker1.py")],
                     cwd=tmp_path)
    failed_at = run.wait_for_line("[worker 1] worker=1 strategy ready", timeout=240)
    code = run.wait(timeout=120)
    assert code == 1, run.text()
    seconds = run.ended_at - failed_at
    print(f"worker 1 failed -> command exited: {seconds:.1f} s")
    # Hang bound only (worker 0 would block in its collective forever); the time itself is printed.
    assert seconds < 60, f"the command took {seconds:.1f} s to exit after worker 1 failed"
    errors = run.err()
    first = next(i for i, line in enumerate(errors) if line.startswith("mwnotebook: worker"))
    assert errors[first] == "mwnotebook: worker 1 raised ValueError: worker 1 fails on purpose", run.text()
    traceback = [line for line in errors[first + 1:] if line.startswith("[worker 1] ")]
    assert any("raise ValueError" in line for line in traceback), run.text()
    assert "\x1b[" not in "\n".join(errors)  # colour codes stripped when stderr is not a terminal
    assert any(line.startswith("mwnotebook: worker 0 ") for line in errors[first + 1:]), run.text()
    report = (tmp_path / "failed.html").read_text()
    assert "worker 1 raised ValueError" in report and "class='failed'" in report
    run.assert_nothing_left()


METRICS_SCRIPT = f"""
import json, os, sys
print(f"argv={{sys.argv[1:]}} file={{os.path.basename(__file__)}}", flush=True)
from IPython.display import publish_display_data
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
records = [{{"step": s, "loss": 1.0 / (s + 1) + index * 0.1}} for s in range(20)]
publish_display_data({{"{METRICS_MIME}": {{"records": records}}}})
print(f"worker {{index}} reported", flush=True)
"""


@pytest.mark.integration
def test_report_has_a_loss_curve_per_worker_and_is_self_contained(tmp_path: Path) -> None:
    script = tmp_path / "metrics.py"
    script.write_text(METRICS_SCRIPT)
    run = CommandRun(["run", "-n", "2", "--cpu", "--report", "r.html", str(script), "--", "--epochs", "3"],
                     cwd=tmp_path)
    assert run.wait(timeout=120) == 0, run.text()
    assert "[worker 0] argv=['--epochs', '3'] file=metrics.py" in run.out(), run.text()
    assert "[worker 1] worker 1 reported" in run.out()
    report = (tmp_path / "r.html").read_text()
    assert "No metrics were reported" not in report
    # the dashboard's per-worker figure (dashboard.per_worker_figure)
    assert '"name":"worker 0 (local loss)"' in report and '"name":"worker 1 (local loss)"' in report
    assert "loss per worker" in report
    assert external_resources(report) == []  # plotly.js is inlined: the file works offline
    assert "Plotly.newPlot" in report
    assert len(report) > 1_000_000
    run.assert_nothing_left()


@pytest.mark.integration
def test_run_with_an_evaluator_labels_its_kernel_by_its_role(tmp_path: Path) -> None:
    """``--evaluator`` runs the script on one more kernel; the command labels it ``[evaluator]``, as
    the magic does (the names are handed to the command's observer, not left in a module global)."""
    script = tmp_path / "roles.py"
    script.write_text("import json, os\nprint('task', json.loads(os.environ['TF_CONFIG'])['task']['type'])\n")
    run = CommandRun(["run", "--workers", "1", "--evaluator", "--cpu", "--no-report", str(script)], cwd=tmp_path)
    assert run.wait(timeout=300) == 0, run.text()
    assert sorted(line for line in run.out() if "task" in line) == ["[evaluator] task evaluator",
                                                                     "[worker 0] task worker"], run.text()
    assert not [line for line in run.err() if "Traceback" in line or "ERROR" in line], run.text()
    run.assert_nothing_left()


@pytest.mark.integration
def test_ctrl_c_stops_every_worker_and_exits_130(tmp_path: Path) -> None:
    script = tmp_path / "sleepy.py"
    script.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(300)\n")
    run = CommandRun(["run", "-n", "2", "--no-report", str(script)], cwd=tmp_path)
    run.wait_for_line("[worker 1] sleeping", timeout=120)
    run.wait_for_line("[worker 0] sleeping", timeout=30)
    run.proc.send_signal(signal.SIGINT)
    code = run.wait(timeout=60)
    assert code == 130, run.text()
    assert any("interrupted" in line for line in run.err()), run.text()
    run.assert_nothing_left()


@pytest.mark.integration
def test_ctrl_c_while_the_workers_start_leaves_nothing_behind(tmp_path: Path) -> None:
    script = tmp_path / "quick.py"
    script.write_text("print('ran', flush=True)\n")
    run = CommandRun(["run", "-n", "2", "--no-report", str(script)], cwd=tmp_path)
    run.wait_for_line("mwnotebook: starting 2 workers", timeout=60)
    deadline = time.monotonic() + 30
    while len(run.descendants) < 2 and time.monotonic() < deadline:  # kernels are being created
        time.sleep(0.02)
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(timeout=90) == 130, run.text()
    assert not any("ran" in line for line in run.out()), run.text()
    run.assert_nothing_left()


@pytest.mark.integration
def test_sigterm_stops_every_worker_and_exits_143(tmp_path: Path) -> None:
    script = tmp_path / "sleepy.py"
    script.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(300)\n")
    run = CommandRun(["run", "-n", "2", "--no-report", str(script)], cwd=tmp_path)
    run.wait_for_line("[worker 1] sleeping", timeout=120)
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == 143, run.text()
    run.assert_nothing_left()
