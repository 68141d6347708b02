"""Lesson 13 (notebooks/13_tuning_experiments.ipynb), executed in a real notebook kernel with nbclient:
three learning rates on two workers, compared with %mwruns, --diff and mw_runs, and the TensorBoard
event files read back by TensorBoard's own reader inside the lesson."""

from __future__ import annotations

import re

import pytest

from testbed.lessons import execute_lesson, text_of

pytestmark = [pytest.mark.tf]


@pytest.fixture(scope="module")
def lesson():
    return execute_lesson("13_tuning_experiments", timeout=600)


def _cell(nb, source: str):
    """The first code cell whose source starts with ``source``."""
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source))


def test_three_runs_are_listed_compared_and_read_back_from_tensorboard(lesson):
    for cell in lesson.cells:
        assert not [o for o in cell.get("outputs", []) if o.get("output_type") == "error"], cell.source[:80]
    trains = [c for c in lesson.cells if c.cell_type == "code" and c.source.startswith("%%mwtrain")]
    assert len(trains) == 3
    for cell, lr in zip(trains, ("0.5", "0.1", "0.01")):
        assert f"[worker 1] learning rate {lr}: final loss" in text_of(cell)
    table = text_of(next(c for c in lesson.cells if c.cell_type == "code" and c.source.strip() == "%mwruns"))
    assert [line.split()[0] for line in table.splitlines() if re.match(r"^\d+\s", line)] == ["3", "2", "1"]
    diff = text_of(_cell(lesson, "%mwruns --diff"))
    assert "--env: LR=0.5 -> LR=0.01" in diff and "cell: the same" in diff
    readback = text_of(_cell(lesson, "import numpy as np\nfrom tensorboard"))
    assert "check passed" in readback
    assert len([line for line in readback.splitlines() if "epoch_loss [" in line]) == 9
