"""Worker output in a terminal: terminal IPython (real in-process shell, real worker kernels) and
`mwnotebook run` (real command): identical results once, late thread output printed labelled."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LATE = '''import os, threading, time
_w = os.environ["MWNOTEBOOK_WORKER_INDEX"]
def _late():
    time.sleep(DELAY)
    print("late", _w, flush=True)
threading.Thread(target=_late, daemon=DAEMON).start()
print("body", _w)
'''


def test_identical_results_show_once_labelled_for_all_workers(shell, capsys):
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", "'ans' + 'wer'")
    out = capsys.readouterr().out
    assert out.count("'answer'") == 1 and "[all 2 workers] 'answer'" in out, out
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", "import os\nint(os.environ['MWNOTEBOOK_WORKER_INDEX'])")
    out = capsys.readouterr().out
    assert "[worker 0] 0" in out and "[worker 1] 1" in out, out


def test_late_thread_output_is_printed_labelled(shell, capsys):
    shell.run_cell_magic("mwtrain", "--workers 2 --no-dashboard", LATE.replace("DELAY", "0.5").replace("DAEMON", "True"))
    deadline = time.monotonic() + 10
    seen = ""
    while time.monotonic() < deadline and not all(f"late {w}" in seen for w in (0, 1)):
        time.sleep(0.2)
        seen += capsys.readouterr().out
    for w in (0, 1):
        assert re.search(rf"^\[worker {w}, after cell \d+\] late {w}$", seen, re.M), seen


def test_mwnotebook_run_prints_a_threads_late_output_labelled(tmp_path):
    script = tmp_path / "late.py"
    script.write_text(LATE.replace("DELAY", "2.5").replace("DAEMON", "False"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "mwnotebook.frontend.cli.command", "run", "--workers", "2", "--no-report",
                           str(script)], capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for w in (0, 1):
        assert f"[worker {w}] body {w}\n" in done.stdout
        assert f"[worker {w}, after the script] late {w}\n" in done.stdout, done.stdout
