"""Lesson 12, speed-up against the number of workers (notebooks/12_speedup_and_workers.ipynb, run
with nbclient through testbed/lessons.py): one training program run on 1, 2 and 4 local
workers; each run measures steps/s, examples/s and the time to 97% held-out accuracy, and the table
compares them. No timing is asserted (the machine is shared): only that every size ran, reached the
target with the global batch the workers imply, and that the table shows every row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.lessons import execute_lesson, text_of

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]

RESULTS = Path("/tmp/mwnotebook-lesson-12")


def test_one_program_on_one_two_and_four_workers() -> None:
    nb = execute_lesson("12_speedup_and_workers", timeout=300)
    code = [c for c in nb.cells if c.cell_type == "code"]
    train = [c for c in code if c.source.startswith("%%mwtrain")]
    assert [c.source.splitlines()[0] for c in train] == [
        f"%%mwtrain --workers {n} --cpu" for n in (1, 2, 4)]
    for n, cell in zip((1, 2, 4), train):
        result = json.loads((RESULTS / f"result-{n}.json").read_text())
        assert result["workers"] == n and result["global_batch"] == 256 * n, result
        assert result["steps_per_s"] > 0 and result["examples_per_s"] > 0, result
        assert result["steps_to_target"] is not None and result["final_accuracy"] >= 0.97, result
        assert f"[worker 0] workers={n} global_batch={256 * n} steps/s=" in text_of(cell), text_of(cell)
    table = text_of(next(c for c in code if "runs = [json.load" in c.source)).splitlines()
    assert table[0].split()[:4] == ["workers", "global", "batch", "steps/s"], table
    assert [int(line.split()[0]) for line in table[1:4]] == [1, 2, 4], table
    assert table[1].split()[4] == "1.00x", table
    assert table[4].startswith("this machine: "), table
