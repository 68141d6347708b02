"""The official tutorials' flows in a notebook (notebooks/07, run with nbclient): the chief saves in
%%mwtrain cells, plain notebook cells load / restore and evaluate at the trained accuracy (one Keras
on both sides), and a preempted worker's fit resumes from BackupAndRestore on rerun."""

from __future__ import annotations

import pathlib
import re

import nbformat
import pytest
from nbclient import NotebookClient

from mwnotebook.frontend.notebook.keras_choice import MISMATCH, SWITCHED, KerasChoice

pytestmark = [pytest.mark.tf, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _text(cell) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", []))


@pytest.fixture(scope="module")
def lesson(tmp_path_factory):
    nb = nbformat.read(ROOT / "notebooks" / "07_official_tutorial_flows.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=False,
                   resources={"metadata": {"path": str(tmp_path_factory.mktemp("lesson07"))}}).execute()
    (ROOT / "artifacts").mkdir(exist_ok=True)
    nbformat.write(nb, ROOT / "artifacts" / "07_official_tutorial_flows.executed.ipynb")
    return [c for c in nb.cells if c.cell_type == "code"]


def test_the_notebook_switches_to_tf_keras_and_says_so(lesson):
    assert SWITCHED in _text(lesson[0])
    assert "Keras in the notebook: tf_keras" in _text(lesson[3])


def test_what_the_chief_saved_loads_and_restores_at_the_trained_accuracy(lesson):
    trained = [float(a) for a in re.findall(r"trained: accuracy ([0-9.]+)", _text(lesson[2]))]
    assert len(trained) == 2 and trained[0] == trained[1] and trained[0] >= 0.9, _text(lesson[2])
    saved = float(re.search(r"SavedModel loaded in the notebook: accuracy ([0-9.]+)", _text(lesson[3])).group(1))
    restored = float(re.search(r"checkpoint restored in the notebook: accuracy ([0-9.]+)", _text(lesson[4])).group(1))
    assert saved >= 0.9 and abs(saved - trained[0]) <= 0.05, (saved, trained)
    assert restored == pytest.approx(saved, abs=1e-6)  # the same weights both ways
    assert "files kept: ['checkpoints', 'saved_model']" in _text(lesson[2])  # no scratch copies left


def test_a_preempted_worker_resumes_from_the_backup_on_rerun(lesson):
    first, again = lesson[5], lesson[6]
    errors = [o for o in first.outputs if o.get("output_type") == "error"]
    assert errors and "worker 1" in (errors[0]["evalue"] + "".join(errors[0]["traceback"])), first.outputs
    for w in (0, 1):
        assert f"[worker {w}] epochs run in this cell: [2, 3]" in _text(again), _text(again)


def test_keras_choice_rules():
    env: dict[str, str] = {}
    assert KerasChoice(env, {}, tf_keras_installed=True).on_load() == SWITCHED and env["TF_USE_LEGACY_KERAS"] == "1"
    assert KerasChoice({}, {"tensorflow": object()}, tf_keras_installed=True).on_load() == MISMATCH
    assert KerasChoice({"TF_USE_LEGACY_KERAS": "1"}, {"tensorflow": object()}, tf_keras_installed=True).on_load() is None
    assert KerasChoice({"TF_USE_LEGACY_KERAS": "0"}, {}, tf_keras_installed=True).on_load() is None  # user's choice
    assert KerasChoice({}, {}, tf_keras_installed=False).on_load() is None
    env = {}
    choice = KerasChoice(env, {}, tf_keras_installed=True)
    choice.on_load()
    assert choice.on_cell(workers_use_legacy=False) is None and "TF_USE_LEGACY_KERAS" not in env  # --no-legacy-keras
