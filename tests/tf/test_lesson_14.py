"""Lesson 14 (notebooks/14_finding_the_bottleneck.ipynb), executed in a real notebook kernel with nbclient:
worker 1's slow reads make it the named slow worker, input-bound, in the verdict and in the split of the
same steps on both workers (``--profile-steps``); the input recipe's pipeline takes the verdict away and
the steps get faster; its ``--profile`` run leaves one trace per worker."""

from __future__ import annotations

import re

import pytest

from testbed.lessons import execute_lesson, text_of

pytestmark = [pytest.mark.tf]


@pytest.fixture(scope="module")
def lesson():
    return execute_lesson("14_finding_the_bottleneck", timeout=600)


def _ms_per_step(text: str) -> list[float]:
    return [float(m) for m in re.findall(r"\[worker \d\] ([0-9.]+) ms per step after the first epoch", text)]


def test_the_slow_worker_is_named_then_fixed(lesson):
    for cell in lesson.cells:
        assert not [o for o in cell.get("outputs", []) if o.get("output_type") == "error"], cell.source[:80]
    slow, fixed = (text_of(c) for c in lesson.cells if c.cell_type == "code" and c.source.startswith("%%mwtrain"))

    assert "mwnotebook: worker 1 is the slow worker, input-bound" in slow, slow[-3000:]
    worker1 = next(line for line in slow.splitlines() if line.startswith("mwnotebook: worker 1, steps 20-24: "))
    assert "INPUT BOUND" in worker1, worker1
    worker0 = next(line for line in slow.splitlines() if line.startswith("mwnotebook: worker 0, steps 20-24: "))
    assert "INPUT BOUND" not in worker0, worker0

    assert "is the slow worker" not in fixed and "INPUT BOUND" not in fixed, fixed[-3000:]
    before, after = _ms_per_step(slow), _ms_per_step(fixed)
    assert len(before) == len(after) == 2, (before, after)
    # the steps after the first epoch got faster: 77 -> 11 ms in the executed copy (a ratio, no wall-clock bound)
    assert max(after) < 0.8 * min(before), (before, after)

    if "the profile's summary was lost" in fixed:
        # TensorFlow 2.21's profiler killed a worker as it stopped after the cell (about one run in six
        # here; plain TensorFlow processes too: docs/guide/profiling.md). The cell's run stands; the line
        # says so. The trace and summary checks below need a run without it.
        assert "worker 1 died" in fixed or "worker 0 died" in fixed, fixed[-3000:]
        return
    assert "mwnotebook: traces from step 20 to the cell's end in " in fixed, fixed[-3000:]
    window = [float(re.search(r"^mwnotebook: worker 1, steps 20-24: ([0-9.]+) ms per step", text, re.M).group(1))  # type: ignore[union-attr]
              for text in (slow, fixed)]
    # steps 20-24: 103 -> 9 ms (load 33), 85 -> 29 ms (load 7: the profiler's first traced steps are slow)
    assert window[1] < window[0] / 2, window
    shown = text_of(next(c for c in lesson.cells if c.cell_type == "code" and c.source.strip() == "%mwprofile"))
    assert "profiling is off" in shown and "mwnotebook: worker 1, steps 20-24: " in shown, shown
    files = text_of(next(c for c in lesson.cells if c.cell_type == "code" and c.source.startswith("import glob")))
    assert len(re.findall(r"worker0\.xplane\.pb", files)) == 1 and len(re.findall(r"worker1\.xplane\.pb", files)) == 1, files
