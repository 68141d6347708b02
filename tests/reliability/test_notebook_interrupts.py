"""In a real notebook kernel (jupyter_client, the way a front end drives one), no TensorFlow needed:

* the second Ctrl-C (stop button pressed twice) kills workers that ignored the first, and the next
  cell runs on fresh ones;
* ``%%mwtrain --timeout`` fires: the cell fails naming the worker that hung, and the next cell runs.

Worker code only: the workers catch the first interrupt themselves, so nothing but the second one
can end them. Stamp files tell the test where each worker is (no sleeps to guess it).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed.processes import MW_MODULES, WORKER_MODULES, kill_all, wait_gone
from tests._plugins.reliability_table import record

pytestmark = [pytest.mark.reliability, pytest.mark.integration]

MWTRAIN = "%%mwtrain --workers 2 --cpu\n"
#: Ignores interrupts: each one is caught, stamped and slept through.
STUBBORN = '''import os, time
index = os.environ["MWNOTEBOOK_WORKER_INDEX"]
open({stamp!r} + ".ready." + index, "w").close()
interrupts = 0
while True:
    try:
        time.sleep(600)
    except KeyboardInterrupt:
        interrupts += 1
        open({stamp!r} + ".int" + str(interrupts) + "." + index, "w").close()
'''


def _wait_files(paths: list[Path], timeout: float) -> None:
    deadline = time.monotonic() + timeout  # hang bound only
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"not there after {timeout} s: {[p.name for p in paths if not p.exists()]}"
        time.sleep(0.05)


def test_second_ctrl_c_kills_the_workers_and_the_next_cell_runs(notebook_factory, tmp_path):
    nb = notebook_factory()
    stamp = tmp_path / "w"
    msg_id = nb.submit(MWTRAIN + STUBBORN.format(stamp=str(stamp)))
    _wait_files([tmp_path / f"w.ready.{i}" for i in range(2)], timeout=180)
    old = nb.workers(WORKER_MODULES)
    assert len(old) == 2, old

    nb.km.interrupt_kernel()  # first press of the stop button: every worker is interrupted...
    _wait_files([tmp_path / f"w.int1.{i}" for i in range(2)], timeout=60)
    time.sleep(1.0)  # ...and each one ignored it: still alive a second later
    assert wait_gone(old, timeout=0, modules=MW_MODULES)[0] == old, "the first Ctrl-C alone must not kill the workers"

    t0 = time.monotonic()
    nb.km.interrupt_kernel()  # second press: the workers are killed
    left, gone_s = wait_gone(old, timeout=30, modules=MW_MODULES)
    reply, text, _ = nb.collect(msg_id, timeout=60)
    failed_s = time.monotonic() - t0
    nxt, next_text, _ = nb.execute(MWTRAIN + "import os\nprint('after', os.environ['MWNOTEBOOK_WORKER_INDEX'])",
                                   timeout=180)
    new = nb.workers(WORKER_MODULES)
    recovered = (nxt["content"]["status"] == "ok" and "[worker 0] after 0" in next_text
                 and "[worker 1] after 1" in next_text)
    kill_all(left)
    record("5b second Ctrl-C in a notebook kills stubborn workers", failed_s=failed_s, recovered=recovered,
           orphans=len(left), note=f"workers gone {gone_s:.1f} s after the second interrupt; {reply['content'].get('ename')}")
    assert not left, f"workers still alive after the second Ctrl-C: {sorted(left)}"
    assert reply["content"]["status"] == "error", reply["content"]
    assert not (tmp_path / "w.int2.0").exists() and not (tmp_path / "w.int2.1").exists(), \
        "the second Ctrl-C was passed on as an interrupt instead of killing the workers"
    assert recovered, next_text[-3000:]
    assert len(new) == 2 and not new & old, (old, new)


def test_mwtrain_timeout_fires_in_a_notebook(notebook_factory):
    nb = notebook_factory()
    hang = ("%%mwtrain --workers 2 --cpu --timeout 5\nimport os, time\n"
            "if os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n    time.sleep(600)\nprint('done')\n")
    t0 = time.monotonic()
    reply, text, outputs = nb.execute(hang, timeout=180)  # hang bound only: the cell's own timeout is 5 s
    failed_s = time.monotonic() - t0
    content = reply["content"]
    nxt, next_text, _ = nb.execute(MWTRAIN + "print('next')", timeout=180)
    recovered = nxt["content"]["status"] == "ok" and "[worker 1] next" in next_text
    record("4b %%mwtrain --timeout 5 in a notebook", failed_s=failed_s, recovered=recovered, orphans=None,
           note=f"{content.get('ename')}; counted from cell start")
    assert content["status"] == "error", content
    assert content["ename"] == "ClusterTimeoutError", content
    errors = "\n".join(content.get("traceback", [])) + "".join(str(m["content"]) for m in outputs)
    assert "worker 1" in errors, errors[-3000:]
    assert "[worker 0] done" in text, text[-2000:]
    assert recovered, next_text[-3000:]
