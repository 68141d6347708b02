"""``mwnotebook run --max-restarts``: a worker that dies once is restarted, the script runs again in
fresh workers with its own ``sys.argv`` (the preamble is run in them too), the restart is one
labelled line between the attempts' output, and the command exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

SCRIPT = '''
import os, sys, time
marker = os.path.join(os.path.dirname(__file__), "died-once")
print("argv", sys.argv[1:], flush=True)
if int(os.environ["MWNOTEBOOK_WORKER_INDEX"]) == 1 and not os.path.exists(marker):
    open(marker, "w").close()
    time.sleep(1)  # os._exit drops what the kernel's IOPub thread has not sent yet (the argv line)
    os._exit(9)
time.sleep(0.5)
print("done", flush=True)
'''


def test_run_survives_a_worker_that_dies_once(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-m", "mwnotebook.frontend.cli.command", "run", "-n", "2", "--no-template",
                           "--max-restarts", "1", "--no-report", str(script), "--", "--lr", "3"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)  # a hang bound
    out = proc.stdout
    assert proc.returncode == 0, (out, proc.stderr)
    lines = out.splitlines()
    notes = [i for i, line in enumerate(lines) if line.startswith("[mwnotebook] ")]
    assert len(notes) == 1, out
    restart = notes[0]
    assert lines[restart].startswith("[mwnotebook] worker 1 died (exit code 9); restart 1 of 1, "), lines[restart]
    for worker in (0, 1):
        assert f"[worker {worker}] argv ['--lr', '3']" in lines[:restart]
        assert f"[worker {worker}] argv ['--lr', '3']" in lines[restart:]  # the preamble ran in fresh workers
        assert f"[worker {worker}] done" in lines[restart:]
    assert "[worker 1] done" not in lines[:restart]
