"""The preemption lesson (notebooks/08, run with nbclient in a real notebook kernel): ``%%mwtrain
--max-restarts`` survives two SIGKILLed workers and ends exactly where the undisturbed run ends; an
error in the code is not restarted; a worker that dies every time uses up its restarts and the
error lists every attempt."""

from __future__ import annotations

import pathlib
import re

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.tf, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _text(cell) -> str:
    return "\n".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", []))


def _error(cell) -> str:
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0]["traceback"])) if errors else ""


@pytest.fixture(scope="module")
def lesson(tmp_path_factory):
    nb = nbformat.read(ROOT / "notebooks" / "08_preemption_and_recovery.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=False,
                   resources={"metadata": {"path": str(tmp_path_factory.mktemp("lesson08"))}}).execute()
    (ROOT / "artifacts").mkdir(exist_ok=True)
    nbformat.write(nb, ROOT / "artifacts" / "08_preemption_and_recovery.executed.ipynb")
    return [c for c in nb.cells if c.cell_type == "code"]


def test_the_preempted_cell_restarts_twice_and_ends_like_the_undisturbed_one(lesson):
    preempted = _text(lesson[4])
    notes = re.findall(r"^\[mwnotebook\] (.*)$", preempted, re.M)
    assert len(notes) == 2, preempted
    assert re.fullmatch(r"worker 1 died \(.*SIGKILL.*\) at epoch 3; restart 1 of 3, \d+\.\d s", notes[0]), notes
    assert re.fullmatch(r"worker 0 died \(.*SIGKILL.*\) at epoch 6; restart 2 of 3, \d+\.\d s", notes[1]), notes
    # every attempt's output stays, in order: epochs 1.., then from 3 again, then from 6 again
    begins = [int(n) for n in re.findall(r"^\[worker 0\] epoch (\d+) begins", preempted, re.M)]
    assert begins == [1, 2, 3, 3, 4, 5, 6, 6, 7, 8], begins
    restart_at = [preempted.index(f"[mwnotebook] {note}") for note in notes]
    assert restart_at[0] < preempted.rindex("[worker 0] epoch 3 begins") < restart_at[1]  # the line between
    comparison = _text(lesson[5])
    assert "identical: True" in comparison, comparison
    assert "restart 1: worker 1 died" in comparison and "restart 2: worker 0 died" in comparison


def test_an_error_in_the_code_is_not_restarted(lesson):
    error = _error(lesson[6])
    assert "ValueError: a bug in the cell" in error and "attempt" not in error, error


def test_a_worker_that_dies_every_time_uses_up_its_restarts(lesson):
    error = _error(lesson[7])
    assert "The cell lost workers 2 times (1 restarts):" in error, error
    assert re.search(r"attempt 1: worker 1 died \(exit code 7\).*\n.*attempt 2: worker 1 died \(exit code 7\)", error), error
