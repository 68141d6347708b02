"""Parsing faulthandler's dump into threads (mwnotebook/engine/cell/stacks.py): main thread first, cell
lines with their source, IPython's own frames left out, collectives called out."""

from __future__ import annotations

from mwnotebook.engine.cell.stacks import StacksReport, WorkerStacks, parse_dump

DUMP = '''Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait

Current thread 0x00007f0000000001 (most recent call first):
  File "/site-packages/tensorflow/python/ops/gen_collective_ops.py", line 567 in collective_bcast_send_eager_fallback
  File "/tmp/ipykernel_42/123.py", line 2 in <module>
  File "/site-packages/IPython/core/interactiveshell.py", line 3508 in run_code
'''
CELL = "\n\nimport time\nmodel = build()\n"


def test_main_thread_first_with_cell_source_and_no_ipython_frames():
    threads = parse_dump(DUMP, main_ident=0x7F0000000001, cell_code=CELL)
    assert [t.main for t in threads] == [True, False]
    frames = threads[0].frames
    assert frames[1].endswith(": model = build()")  # leading blank lines dropped, as IPython does
    assert not any("interactiveshell" in f for f in frames)


def test_a_worker_in_a_collective_waits_for_the_others():
    stuck = WorkerStacks(0, "localhost", 1, parse_dump(DUMP, 0x7F0000000001, CELL))
    sleeping = WorkerStacks(1, "localhost", 2, parse_dump(
        'Current thread 0x0000000000000009 (most recent call first):\n  File "/tmp/ipykernel_7/9.py", line 1 in '
        '<module>\n', 9, "time.sleep(600)\n"))
    report = StacksReport([stuck, sleeping])
    assert stuck.collective_frame and not sleeping.collective_frame
    assert report.text().splitlines()[0] == "workers [0] wait in a collective for workers [1]"
    assert "time.sleep(600)" in report.text()
