"""Pure recipe arithmetic, the worker setup snippet and the input-bound timer (no TensorFlow)."""

from __future__ import annotations

import math
import time

import pytest

from mwnotebook import profiling, recipes
from mwnotebook.config import worker_env as worker_setup
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.errors import ConfigError


def test_global_batch_is_per_replica_times_workers_times_devices():
    # The seed: 64 per replica, 3 workers, 2 GPUs each.
    assert recipes.global_batch_size(64, workers=3, devices_per_worker=2) == 384
    assert recipes.global_batch_size(16, replicas=2) == 32
    assert recipes.global_batch_size(16) == 16


@pytest.mark.parametrize("kwargs", [dict(per_replica=0), dict(per_replica=8, workers=0),
                                    dict(per_replica=8, replicas=-1), dict(per_replica=2.5)])
def test_global_batch_rejects_nonsense(kwargs):
    per = kwargs.pop("per_replica")
    with pytest.raises(ConfigError):
        recipes.global_batch_size(per, **kwargs)


def test_linear_scaling_rule():
    assert recipes.scaled_lr(1e-3, 512) == pytest.approx(0.016)  # the seed: BASE_LR * 512 / 32
    assert recipes.scaled_lr(0.1, 1024, base_batch=256) == pytest.approx(0.4)
    with pytest.raises(ConfigError):
        recipes.scaled_lr(0.0, 512)


def test_steps_per_epoch():
    assert recipes.steps_per_epoch(60_000, 512) == 117
    assert recipes.steps_per_epoch(60_000, 512, drop_remainder=False) == 118
    with pytest.raises(ConfigError):
        recipes.steps_per_epoch(100, 512)


def test_warmup_cosine_matches_formula_at_warmup_and_decay_points():
    s = recipes.WarmupCosine.from_epochs(1e-3, 512, steps_per_epoch=20, warmup_epochs=5,
                                         decay_steps=1000)
    peak = 1e-3 * 512 / 32
    assert s.warmup_steps == 100 and s.peak == pytest.approx(peak)
    # Warmup: linear from BASE_LR (step 0) to the scaled peak (step 100).
    assert s(0) == pytest.approx(1e-3)
    assert s(50) == pytest.approx(1e-3 + (peak - 1e-3) * 0.5)
    assert s(99) == pytest.approx(1e-3 + (peak - 1e-3) * 0.99)
    assert s(100) == pytest.approx(peak)
    # Decay: cosine from the peak over decay_steps, then flat at alpha * peak.
    assert s(100 + 250) == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * 0.25)))
    assert s(100 + 500) == pytest.approx(peak / 2)
    assert s(100 + 1000) == pytest.approx(0.0, abs=1e-12)
    assert s(5000) == pytest.approx(0.0, abs=1e-12)
    # The warmup really increases and the decay really decreases.
    values = [s(i) for i in range(0, 1101, 10)]
    assert values.index(max(values)) == 10


def test_warmup_cosine_alpha_and_start():
    s = recipes.WarmupCosine(1e-3, 64, warmup_steps=10, decay_steps=100, alpha=0.1,
                             warmup_from=0.0)
    assert s(0) == 0.0
    assert s(5) == pytest.approx(s.peak / 2)
    assert s(110) == pytest.approx(0.1 * s.peak)
    with pytest.raises(ConfigError):
        recipes.WarmupCosine(1e-3, 64, warmup_steps=-1, decay_steps=100)
    with pytest.raises(ConfigError):
        recipes.WarmupCosine(1e-3, 64, warmup_steps=1, decay_steps=0)


def test_recipe_code_sets_policy_and_xla_and_nothing_else():
    assert worker_setup.recipe_code(mixed_precision=None, xla=False) == ""
    code = worker_setup.recipe_code(mixed_precision="float16", xla=True)
    assert "set_global_policy('mixed_float16')" in code
    assert "tf.config.optimizer.set_jit(True)" in code
    assert "bfloat16" in worker_setup.recipe_code(mixed_precision="bfloat16")
    assert "set_jit" not in worker_setup.recipe_code(mixed_precision="bfloat16")
    compile(code, "<setup>", "exec")  # valid Python
    # It leaves no names behind in the user's namespace.
    assert code.rstrip().endswith("del __mwnotebook_setup")


def test_recipe_code_reads_a_spec():
    spec = ClusterSpec(mixed_precision="bfloat16", xla=True, cpu=True, env={"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"})
    code = worker_setup.recipe_code(spec)
    assert "mixed_bfloat16" in code and "set_jit(True)" in code
    assert worker_setup.recipe_env(spec) == {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"}
    assert worker_setup.recipe_env(ClusterSpec(workers=1, xla=True)) == {}
    assert worker_setup.recipe_env(ClusterSpec(workers=1, cpu=True)) == {}


def test_recipe_code_rejects_unknown_precision():
    with pytest.raises(ConfigError, match="bfloat16, float16"):
        worker_setup.recipe_code(mixed_precision="float8")


def _slow_batches(delay: float):
    while True:
        time.sleep(delay)
        yield None


def test_input_bound_share_is_high_when_input_is_slow_and_low_when_not():
    slow = profiling.measure_input_bound(_slow_batches(0.02), lambda b: time.sleep(0.002),
                                         steps=10, warmup=1)
    assert slow.share > 0.5 and slow.input_bound
    fast = profiling.measure_input_bound(iter(range(100)), lambda b: time.sleep(0.02),
                                         steps=10, warmup=1)
    assert fast.share < 0.05 and not fast.input_bound
    assert "INPUT BOUND" in str(slow) and "ok" in str(fast)


def test_input_bound_check_says_when_data_runs_out():
    with pytest.raises(ValueError, match="ran out after 3"):
        profiling.measure_input_bound([1, 2, 3], lambda b: None, steps=5, warmup=0)
