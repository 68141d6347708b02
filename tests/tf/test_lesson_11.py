"""Lesson 11, a hang and how to find it (notebooks/11_a_hang_and_how_to_find_it.ipynb, run with
nbclient through testbed/lessons.py): a collective called on worker 0 only hangs; the stacks
asked for while it hangs say ``workers [0] wait in a collective for workers [1]``; ``--timeout 20``
ends the cell with ``ClusterTimeoutError`` carrying the same stacks; the fixed cell (the collective on
every worker) then runs on the restarted workers."""

from __future__ import annotations

import re

import nbformat
import pytest

from testbed.lessons import execute_lesson, text_of

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]

DIAGNOSIS = "workers [0] wait in a collective for workers [1]"


def error_of(cell: nbformat.NotebookNode) -> tuple[str, str]:
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert len(errors) == 1, cell.get("outputs")
    return errors[0]["ename"], re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0]["traceback"]))


def test_the_hang_is_found_bounded_and_fixed() -> None:
    nb = execute_lesson("11_a_hang_and_how_to_find_it", timeout=300)
    code = [c for c in nb.cells if c.cell_type == "code"]
    train = [c for c in code if c.source.startswith("%%mwtrain")]
    assert len(train) == 3, [c.source[:40] for c in train]
    working, hung, fixed = train

    for cell in (working, fixed):
        lines = text_of(cell).splitlines()
        assert "[worker 0] total 2.0" in lines, text_of(cell)
        assert {"[worker 0] worker 0 done", "[worker 1] worker 1 done"} <= set(lines), text_of(cell)

    assert "--timeout 20" in hung.source
    streams = "".join(o.get("text", "") for o in hung.outputs if o.get("output_type") == "stream")
    assert "[worker 1] worker 1 done" in streams and "[worker 0]" not in streams, streams[:2000]
    # the timer's %mwcluster stacks, printed while the cell hung: the diagnosis and the cell's line
    assert DIAGNOSIS in streams, streams[:3000]
    assert "in global_sum: return strategy.reduce(" in streams, streams[:6000]
    name, error = error_of(hung)
    assert name == "ClusterTimeoutError", error[-2000:]
    assert "worker 0 was still running at the deadline" in error and DIAGNOSIS in error, error[-3000:]

    after = next(c for c in code if "sys.last_value" in c.source)
    assert text_of(after).splitlines()[:2] == [
        "ClusterTimeoutError - worker 0 was still running at the deadline", DIAGNOSIS], text_of(after)
