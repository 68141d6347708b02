"""Pure metric helpers: record collection, local/global series, downsampling, tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mwnotebook.shared.metrics import (
    MetricsStore,
    as_float,
    downsample,
    encode_float,
    global_key,
    records_to_dataframe,
)
from testbed.modules import require


def test_nonfinite_values_round_trip_through_json_safe_strings():
    for value in (1.5, math.inf, -math.inf):
        assert as_float(encode_float(value)) == value
    assert math.isnan(as_float(encode_float(math.nan)))
    assert as_float("not a number") is None
    assert as_float(None) is None
    assert as_float(True) == 1.0


def test_global_key():
    assert global_key("loss") == "global_loss"
    assert global_key("global_loss") == "global_loss"


def test_store_keeps_local_series_per_worker_and_one_global_series():
    store = MetricsStore()
    for step in range(5):
        store.add(0, [{"step": step, "loss": 1.0 + step, "global_loss": 10.0 + step}])
        store.add(1, [{"step": step, "loss": 2.0 + step, "global_loss": 10.0 + step}])
    x0, y0 = store.local_series(0, "loss")
    x1, y1 = store.local_series(1, "loss")
    gx, gy = store.global_series("loss")
    assert list(x0) == [0, 1, 2, 3, 4] and list(y0) == [1, 2, 3, 4, 5]
    assert list(y1) == [2, 3, 4, 5, 6]
    # the global value arrives from both workers but is drawn once
    assert list(gx) == [0, 1, 2, 3, 4] and list(gy) == [10, 11, 12, 13, 14]
    assert len(store) == 10
    assert store.workers() == [0, 1]
    assert store.metric_names() == ["global_loss", "loss"]


def test_store_stamps_worker_and_keeps_every_record_in_order():
    store = MetricsStore()
    store.add(1, [{"step": 0, "loss": 1.0, "worker": 99}])
    store.add(0, [{"step": 0, "loss": 2.0}])
    assert [r["worker"] for r in store.records] == [1, 0]
    store.records[0]["loss"] = 123.0  # a copy: the store is not changed from outside
    assert store.records[0]["loss"] == 1.0


def test_epoch_records_are_kept_but_not_plotted_and_nan_is_a_gap():
    store = MetricsStore()
    store.add(0, [{"step": 3, "kind": "epoch", "epoch": 0, "global_loss": 0.5},
                  {"step": 1, "kind": "batch", "loss": "NaN"},
                  {"step": 2, "loss": 0.25, "note": "text is ignored"}])
    x, y = store.local_series(0, "loss")
    assert list(x) == [1, 2] and math.isnan(y[0]) and y[1] == 0.25
    assert len(store.global_series("loss")[0]) == 0
    assert len(store.records) == 3


def test_missing_series_are_empty():
    store = MetricsStore()
    assert store.local_series(3, "loss")[0].size == 0
    assert store.global_series("loss")[0].size == 0
    assert store.point_count(0, "loss") == 0


def test_downsample_leaves_short_series_alone():
    x, y = downsample([0, 1, 2], [3.0, 2.0, 1.0], 100)
    assert list(x) == [0, 1, 2] and list(y) == [3, 2, 1]


@pytest.mark.parametrize("n", [1001, 5000, 123_457])
def test_downsample_bounds_points_and_keeps_ends_and_extremes(n):
    rng = np.random.default_rng(n)
    xs = np.arange(n, dtype=float)
    ys = rng.normal(size=n)
    spike = n // 3
    ys[spike] = 50.0  # one spike must survive decimation
    ys[spike + 1] = -50.0
    dx, dy = downsample(xs, ys, 1000)
    assert 4 <= len(dx) <= 1000
    assert dx[0] == 0 and dx[-1] == n - 1
    assert np.all(np.diff(dx) > 0)
    assert dy.max() == 50.0 and dy.min() == -50.0
    # every kept point is a real point of the series
    assert np.array_equal(ys[dx.astype(int)], dy)


def test_downsample_survives_nan_runs():
    ys = np.full(10_000, np.nan)
    ys[5000] = 1.0
    dx, dy = downsample(np.arange(10_000), ys, 200)
    assert len(dx) <= 200 and 1.0 in dy


def test_downsample_rejects_tiny_limits():
    with pytest.raises(ValueError):
        downsample([1, 2, 3], [1, 2, 3], 2)


def test_dataframe_has_worker_and_step_first_and_real_nans():
    pd = require("pandas", "pip install pandas")
    frame = records_to_dataframe([{"loss": "NaN", "step": 0, "worker": 1}, {"loss": 0.5, "step": 1, "worker": 0}])
    assert list(frame.columns[:2]) == ["worker", "step"]
    assert frame["loss"].isna().tolist() == [True, False]
    assert isinstance(frame, pd.DataFrame)
