# ruff: noqa: SLF001  (tf_keras's private verbosity hook and strategy flag are what is tested)
"""tf_keras ``verbose=1`` under ParameterServerStrategy becomes the per-epoch line with a warning
(processes/runtime/ps_guard.py), on a stand-in for tf_keras's training module; every other strategy
keeps its verbosity. tests/tf/test_ps_roles.py runs the real ``fit`` in a coordinator."""

from __future__ import annotations

import types
import warnings

import pytest

from mwnotebook.processes.runtime import ps_guard


def training_module() -> types.ModuleType:
    """What tf_keras's ``_get_verbosity`` does (tf_keras/src/engine/training.py), in short."""
    module = types.ModuleType("fake_training")

    def _get_verbosity(verbose, distribute_strategy):
        if verbose == 1 and distribute_strategy._should_use_with_coordinator:
            raise ValueError("`verbose=1` is not allowed with `ParameterServerStrategy`")
        if verbose == "auto":
            return 2 if distribute_strategy._should_use_with_coordinator else 1
        return verbose
    module._get_verbosity = _get_verbosity
    return module


PS = types.SimpleNamespace(_should_use_with_coordinator=True)
MIRRORED = types.SimpleNamespace(_should_use_with_coordinator=False)


def test_verbose_1_under_a_coordinator_strategy_is_the_epoch_line_with_a_warning():
    module = training_module()
    ps_guard.patch_keras_verbosity(module)
    with pytest.warns(ps_guard.ProgressBarUnderParameterServer, match="verbose=1 .* one line per epoch"):
        assert module._get_verbosity(1, PS) == 2


@pytest.mark.parametrize(("verbose", "strategy", "expected"),
                         [(1, MIRRORED, 1), ("auto", PS, 2), ("auto", MIRRORED, 1), (0, PS, 0), (2, PS, 2)])
def test_everything_else_is_left_to_tf_keras_without_a_word(verbose, strategy, expected):
    module = training_module()
    ps_guard.patch_keras_verbosity(module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert module._get_verbosity(verbose, strategy) == expected


def test_patching_twice_wraps_once():
    module = training_module()
    ps_guard.patch_keras_verbosity(module)
    once = module._get_verbosity
    ps_guard.patch_keras_verbosity(module)
    assert module._get_verbosity is once
