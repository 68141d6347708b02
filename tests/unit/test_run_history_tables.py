"""The run history's tables, diff, series naming and outlets' messages (mwnotebook/experiments/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mwnotebook.errors import ConfigError
from mwnotebook.experiments import mlflow_log, table
from mwnotebook.experiments.history import RunHistory
from mwnotebook.experiments.outlets import Outlets, send
from mwnotebook.experiments.series import scalars
from tests._shared.fakes import RECORDS


def _history() -> RunHistory:
    history = RunHistory()
    history.record(line="--workers 2", cell="lr = 0.1\nfit(lr)\n", started=100.0, duration=2.0, workers=2,
                   metrics=RECORDS, options={"workers": "2"},
                   tasks=[{"name": "worker:0", "host": "localhost", "tf_config": "{}"}])
    history.record(line="--workers 2 --tensorboard tb", cell="lr = 0.05\nfit(lr)\n", started=200.0, duration=2.0,
                   workers=2, outcome="failed", error="worker 1 raised ValueError: x", metrics=RECORDS[:2],
                   options={"workers": "2", "tensorboard": "tb"}, restarts=1)
    return history


def test_scalars_name_workers_global_and_epochs() -> None:
    got = list(scalars(RECORDS))
    assert ("worker-0", "loss", 1, 1.0, 0.9) in got and ("worker-1", "loss", 1, 1.0, 0.7) in got
    assert [s for s in got if s[0] == "global"] == [("global", "loss", 1, 1.0, 0.8),
                                                    ("global", "epoch_loss", 0, 2.0, 0.45)]
    assert ("worker-1", "epoch_loss", 0, 2.0, 0.4) in got


def test_diff_names_changed_options_and_cell_lines() -> None:
    history = _history()
    lines = table.diff(history.get(1), history.get(2))
    assert "  --tensorboard: (not set) -> tb" in lines
    assert not any(line.startswith("  --workers") for line in lines)
    assert "  -lr = 0.1" in lines and "  +lr = 0.05" in lines and "   fit(lr)" not in lines
    assert table.diff(history.get(1), history.get(1))[1:] == ["options: the same", "cell: the same"]


def test_table_latest_first_with_outcome_restarts_and_final_values() -> None:
    header, body = table.text_rows(_history().records())
    assert header[:3] == ["run", "started", "time"] and "loss" in header
    assert [row[0] for row in body] == ["2", "1"]
    assert body[0][4] == "failed (1 restart): worker 1 raised ValueError: x"
    assert body[1][header.index("loss")] == "0.45"


def test_frame_has_one_row_per_run() -> None:
    frame = table.frame(_history().records())
    assert list(frame.index) == [2, 1] and frame.loc[1, "worker-1/loss"] == 0.4
    assert frame.loc[2, "outcome"] == "failed"


def test_an_unwritable_tensorboard_directory_is_one_line_and_the_run_stays(tmp_path: Path) -> None:
    history = _history()
    blocker = tmp_path / "file"
    blocker.write_text("")
    record, line = send(history, 1, Outlets(tensorboard=str(blocker / "tb")))
    assert line is not None and "\n" not in line
    assert "run 1 was not recorded in TensorBoard" in line and "NotADirectoryError" in line
    assert line.endswith(f"%mwruns --log 1 --tensorboard {blocker / 'tb'}")
    assert record.not_logged and history.metrics(1) == RECORDS
    record, line = send(history, 1, Outlets(tensorboard=str(tmp_path / "tb")))
    assert line is None and record.logged["tensorboard"].startswith(str(tmp_path / "tb" / "run-1-"))
    assert record.not_logged == ()


def test_bad_outlet_options_are_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="--tensorboard needs a directory"):
        Outlets(tensorboard=" ").check()
    real = mlflow_log.importlib.util.find_spec
    monkeypatch.setattr(mlflow_log.importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'mwnotebook\[mlflow\]'"):
        Outlets(mlflow="").check()


def test_mlflow_parameters_and_tf_config_table() -> None:
    record = _history().get(1)
    assert mlflow_log.params(record) == {"workers": "2", "cell_hash": record.cell_hash, "worker_count": "2"}
    assert "| worker:0 | localhost | `{}` |" in mlflow_log.tf_config_table(record)
    assert mlflow_log.metric_key("global", "loss") == "loss"
    assert mlflow_log.metric_key("worker-1", "epoch_loss") == "worker-1/epoch_loss"
    assert Outlets(tensorboard="my dir", mlflow="").options() == "--tensorboard 'my dir' --mlflow"
