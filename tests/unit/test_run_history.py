"""The run history's pure parts: the cell hash, final values, order, and the files it keeps
(mwnotebook/experiments/history.py, store.py)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from mwnotebook.experiments.history import GLOBAL, RunHistory, cell_hash, final_values
from mwnotebook.experiments.store import RunStore, kernel_id
from tests._shared.fakes import RECORDS


def test_cell_hash_ignores_line_endings_and_trailing_space_but_not_code() -> None:
    assert cell_hash("a = 1\nprint(a)\n") == cell_hash("a = 1  \r\nprint(a)")
    assert cell_hash("a = 1\n") != cell_hash("a = 2\n")
    assert len(cell_hash("x")) == 16


def test_final_values_per_worker_and_global() -> None:
    final = final_values(RECORDS)
    assert final["0"]["loss"] == 0.5 and final["1"]["loss"] == 0.4
    assert final[GLOBAL] == {"loss": 0.45}
    assert final["0"]["accuracy"] != final["0"]["accuracy"]  # NaN kept as NaN


def _record(history: RunHistory, cell: str, outcome: str = "ok") -> int:
    return history.record(line="--workers 2", cell=cell, started=100.0, duration=1.5, workers=2,
                          hosts=["localhost", "localhost"], outcome=outcome,  # type: ignore[arg-type]
                          metrics=RECORDS).number


def test_numbers_order_and_earlier_runs_of_a_cell() -> None:
    history = RunHistory()
    assert [_record(history, c) for c in ("a", "b", "a", "a")] == [1, 2, 3, 4]
    assert [r.number for r in history.earlier_runs(cell_hash("a"), 2)] == [4, 3]
    assert history.earlier_runs(cell_hash("zzz"), 5) == []
    assert history.metrics(2)[0]["loss"] == 0.9
    with pytest.raises(KeyError, match="no run 9"):
        history.get(9)


def test_the_store_keeps_runs_for_the_restarted_kernel(tmp_path: Path) -> None:
    store = RunStore.for_kernel("abc-123", runtime_dir=tmp_path)
    history = RunHistory(store)
    _record(history, "a")
    _record(history, "b", outcome="failed")
    history.update(1, logged={"tensorboard": "tb/run-1"})
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    for path in store.directory.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    again = RunHistory(RunStore.for_kernel("abc-123", runtime_dir=tmp_path))
    assert [(r.number, r.outcome, dict(r.logged)) for r in again.records()] == [
        (1, "ok", {"tensorboard": "tb/run-1"}), (2, "failed", {})]
    assert again.records()[0].hosts == ("localhost", "localhost")
    assert again.metrics(2) == RECORDS
    assert again.next_number() == 3


def test_a_damaged_line_is_skipped(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    history = RunHistory(store)
    _record(history, "a")
    with open(store.index, "a") as f:
        f.write("{not json\n")
    _record(history, "b")
    assert [r.number for r in RunHistory(RunStore(tmp_path / "runs")).records()] == [1, 2]


def test_an_unwritable_store_keeps_the_run_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"  # a file where the directory should be: unwritable even for root
    blocker.write_text("")
    history = RunHistory(RunStore(blocker / "runs"))
    assert _record(history, "a") == 1 and history.update(1, restarts=1).restarts == 1
    assert [r.number for r in history.records()] == [1] and history.metrics(1) == RECORDS


def test_other_kernels_histories_untouched_for_a_month_are_removed(tmp_path: Path) -> None:
    old, recent = (RunStore.for_kernel(k, runtime_dir=tmp_path) for k in ("old", "recent"))
    for store in (old, recent):
        _record(RunHistory(store), "a")
    month_ago = time.time() - 31 * 86400
    for path in [old.directory, *old.directory.iterdir()]:
        os.utime(path, (month_ago, month_ago))
    (tmp_path / "mwnotebook" / "cluster-abc.json").write_text("{}")  # not a history: left alone
    mine = RunStore.for_kernel("mine", runtime_dir=tmp_path)
    assert mine.remove_stale() == [old.directory]
    assert recent.directory.exists() and (tmp_path / "mwnotebook" / "cluster-abc.json").exists()


def test_kernel_id_from_the_connection_file() -> None:
    assert kernel_id("/run/user/0/jupyter/kernel-3f2a-99.json") == "3f2a-99"
    assert kernel_id("/tmp/tmpnjvp7hfe.json") == "tmpnjvp7hfe"  # jupyter_client alone (nbclient)
    assert kernel_id("/tmp/a b.json") is None and kernel_id("/tmp/kernel.txt") is None


def test_earlier_runs_follow_an_edited_notebook_cell_by_its_front_end_id() -> None:
    """A new learning rate typed into the same cell changes its text, not its id: its earlier runs
    are still that cell's; a kernel with no cell ids (nbclient) still matches by the text."""
    history = RunHistory()
    history.record(line="", cell="lr = 0.1", started=1.0, duration=1.0, workers=2, cell_id="cell-a")
    history.record(line="", cell="lr = 0.2", started=2.0, duration=1.0, workers=2, cell_id="cell-a")
    history.record(line="", cell="lr = 0.1", started=3.0, duration=1.0, workers=2, cell_id="cell-b")
    history.record(line="", cell="other", started=4.0, duration=1.0, workers=2)
    assert [r.number for r in history.earlier_runs(cell_hash("lr = 0.3"), 5, "cell-a")] == [2, 1]
    assert [r.number for r in history.earlier_runs(cell_hash("lr = 0.1"), 5, None)] == [3, 1]
    assert [r.number for r in history.earlier_runs(cell_hash("lr = 0.1"), 1, "cell-a")] == [3]
    assert history.earlier_runs(cell_hash("lr = 0.3"), 5, "cell-c") == []
    kept = history.records()[0].to_json()
    assert kept["cell_id"] == "cell-a"
