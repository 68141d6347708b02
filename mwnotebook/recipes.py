"""The seed's performance recipes as functions: global batch, scaled LR schedule, input pipeline.

Pure arithmetic here never imports TensorFlow; only :meth:`WarmupCosine.keras_schedule` and
:func:`input_pipeline` do, lazily, and they use ``tf.keras`` so that they follow the worker's Keras
(``tf_keras`` when ``TF_USE_LEGACY_KERAS=1``, which mwnotebook workers set).

Two things in the seed's snippet do not do what its comments say; both are fixed here.

1. The schedule. The seed writes::

       CosineDecay(initial_learning_rate=BASE_LR * (GLOBAL_BATCH_SIZE / 32),
                   decay_steps=1000, warmup_steps=WARMUP_EPOCHS * steps_per_epoch)

   Keras only warms up when ``warmup_target`` is given; without it ``warmup_steps`` is ignored,
   so training starts at the full scaled rate (16x BASE_LR for a global batch of 512) with no
   warmup at all, which is the very instability linear scaling's warmup exists to prevent
   (Goyal et al., 2017). :class:`WarmupCosine` does what was meant: start at ``BASE_LR`` (the
   rate tuned for the base batch), ramp linearly to ``BASE_LR * global_batch / base_batch`` over
   the warmup steps, then cosine-decay from there over ``decay_steps`` to ``alpha * peak``.

2. The pipeline order ``... .map(preprocess).prefetch(AUTOTUNE).cache()``: see
   :func:`input_pipeline`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mwnotebook.errors import ConfigError

__all__ = ["SEED_BASE_BATCH", "WarmupCosine", "global_batch_size", "input_pipeline", "scaled_lr", "steps_per_epoch"]

#: The batch size the seed's ``BASE_LR`` was tuned for (``BASE_LR * GLOBAL_BATCH_SIZE / 32``).
SEED_BASE_BATCH = 32


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer (got {value!r})")
    return value


def global_batch_size(per_replica: int, *, replicas: int | None = None, workers: int = 1,
                      devices_per_worker: int = 1) -> int:
    """Global batch = per-replica batch x replicas (= workers x devices per worker).

    The seed's ``GLOBAL_BATCH = BATCH_PER_REPLICA * NUM_WORKERS * GPUS_PER_WORKER``. Pass
    ``replicas`` (e.g. ``strategy.num_replicas_in_sync``) or ``workers`` and ``devices_per_worker``.
    """
    _positive_int("per_replica", per_replica)
    if replicas is None:
        replicas = _positive_int("workers", workers) * _positive_int("devices_per_worker",
                                                                     devices_per_worker)
    return per_replica * _positive_int("replicas", replicas)


def scaled_lr(base_lr: float, global_batch: int, base_batch: int = SEED_BASE_BATCH) -> float:
    """Linear scaling rule: ``base_lr * global_batch / base_batch``."""
    if not base_lr > 0:
        raise ConfigError(f"base_lr must be positive (got {base_lr!r})")
    return base_lr * _positive_int("global_batch", global_batch) / _positive_int("base_batch",
                                                                                base_batch)


def steps_per_epoch(num_examples: int, global_batch: int, drop_remainder: bool = True) -> int:
    """Optimizer steps in one pass over ``num_examples`` at ``global_batch``."""
    _positive_int("num_examples", num_examples)
    _positive_int("global_batch", global_batch)
    steps = num_examples // global_batch if drop_remainder else -(-num_examples // global_batch)
    if steps < 1:
        raise ConfigError(f"{num_examples} examples make no full batch of {global_batch}")
    return steps


@dataclass(frozen=True)
class WarmupCosine:
    """Linear LR scaling with linear warmup and cosine decay, as plain arithmetic.

    ``lr(step)``: ``warmup_from + (peak - warmup_from) * step / warmup_steps`` while
    ``step < warmup_steps``; then ``peak * ((1 - alpha) * 0.5 * (1 + cos(pi * t)) + alpha)``
    with ``t = min(step - warmup_steps, decay_steps) / decay_steps``. ``peak`` is
    :func:`scaled_lr`; ``warmup_from`` defaults to ``base_lr``. Identical to Keras'
    ``CosineDecay(warmup_from, decay_steps, alpha, warmup_target=peak, warmup_steps=...)``,
    which :meth:`keras_schedule` builds.
    """

    base_lr: float
    global_batch: int
    warmup_steps: int
    decay_steps: int
    base_batch: int = SEED_BASE_BATCH
    alpha: float = 0.0
    warmup_from: float | None = None

    def __post_init__(self) -> None:
        scaled_lr(self.base_lr, self.global_batch, self.base_batch)  # validates
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) \
                or self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0 (got {self.warmup_steps!r})")
        _positive_int("decay_steps", self.decay_steps)
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"alpha must be in [0, 1] (got {self.alpha!r})")

    @classmethod
    def from_epochs(cls, base_lr: float, global_batch: int, *, steps_per_epoch: int,
                    warmup_epochs: float = 5, decay_steps: int = 1000,
                    **kwargs: Any) -> WarmupCosine:
        """The seed's parameters: ``warmup_steps = WARMUP_EPOCHS * steps_per_epoch``."""
        _positive_int("steps_per_epoch", steps_per_epoch)
        return cls(base_lr, global_batch, int(round(warmup_epochs * steps_per_epoch)),
                   decay_steps, **kwargs)

    @property
    def peak(self) -> float:
        """The rate the warmup ends at: ``base_lr * global_batch / base_batch`` (linear scaling)."""
        return scaled_lr(self.base_lr, self.global_batch, self.base_batch)

    @property
    def start(self) -> float:
        """The rate at step 0: ``warmup_from``, or ``base_lr`` when it is not given."""
        return self.base_lr if self.warmup_from is None else self.warmup_from

    def __call__(self, step: float) -> float:
        step = max(0.0, float(step))
        if step < self.warmup_steps:
            return self.start + (self.peak - self.start) * step / self.warmup_steps
        t = min(step - self.warmup_steps, self.decay_steps) / self.decay_steps
        return self.peak * ((1 - self.alpha) * 0.5 * (1 + math.cos(math.pi * t)) + self.alpha)

    def keras_schedule(self) -> Any:
        """The same schedule as ``tf.keras.optimizers.schedules.CosineDecay`` (for optimizers)."""
        import tensorflow as tf

        if self.warmup_steps == 0:
            return tf.keras.optimizers.schedules.CosineDecay(
                self.peak, self.decay_steps, alpha=self.alpha)
        return tf.keras.optimizers.schedules.CosineDecay(
            self.start, self.decay_steps, alpha=self.alpha,
            warmup_target=self.peak, warmup_steps=self.warmup_steps)


def input_pipeline(data: Any, *, batch_size: int, preprocess: Callable[..., Any] | None = None,
                   augment: Callable[..., Any] | None = None,
                   batch_map: Callable[..., Any] | None = None, shuffle_buffer: int = 10_000,
                   cache: bool | str = True, drop_remainder: bool = True, repeat: bool = False,
                   seed: int | None = None, input_context: Any = None,
                   deterministic: bool | None = None) -> Any:
    """Build an AUTOTUNE ``tf.data`` pipeline in the order that keeps every stage useful.

    ``data``: a ``tf.data.Dataset`` or anything ``from_tensor_slices`` takes (``(x, y)`` arrays).
    ``batch_size``: the *global* batch when ``input_context`` is given (the ``InputContext`` of
    ``strategy.distribute_datasets_from_function``: the data is sharded per input pipeline and
    batched at the per-replica size), else the batch size itself.

    Order and why::

        source -> shard -> map(preprocess) -> cache -> shuffle -> [repeat] -> map(augment)
               -> batch(drop_remainder) -> map(batch_map) -> prefetch(AUTOTUNE)

    - ``preprocess`` (deterministic, per example: decode, normalise) runs in parallel
      (``AUTOTUNE``) *before* ``cache``: the expensive work is done once, in the first epoch.
    - ``cache`` comes *before* ``shuffle``: the cache stores examples, and every epoch reshuffles
      them. The seed caches at the very end (``.shuffle().batch().map().prefetch().cache()``),
      which records the first epoch's shuffled batches and replays them: every later epoch sees
      the same batches in the same order (shuffling happens once), and a random ``preprocess``
      (augmentation) is frozen too. ``augment`` therefore runs *after* the cache.
    - ``prefetch(AUTOTUNE)`` is last, so the next batch is produced while the current step
      runs. In the seed, ``prefetch`` sits *before* ``cache``: from the second epoch on, batches
      come straight out of the cache with nothing prefetching after it, so the overlap of input
      and compute is gone exactly where the cache was supposed to help.
    - ``drop_remainder=True`` keeps every batch the same static size: needed on TPU, and under
      MultiWorkerMirroredStrategy it keeps the global batch (and so the scaled LR) constant.
    - ``batch_map`` is a vectorised per-batch function (like the seed's ``map`` after ``batch``);
      it runs every epoch (not cached), in parallel.

    ``cache``: ``True`` = in memory, a string = a cache file prefix, ``False`` = no cache (data
    too large for memory). A cache is only kept once an epoch was read to the end; with
    ``repeat=True`` the cache sits before the repeat, so that always happens.
    """
    import tensorflow as tf

    autotune = tf.data.AUTOTUNE
    _positive_int("batch_size", batch_size)
    ds = data if isinstance(data, tf.data.Dataset) else tf.data.Dataset.from_tensor_slices(data)
    per_batch = batch_size
    if input_context is not None:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        per_batch = input_context.get_per_replica_batch_size(batch_size)
    if preprocess is not None:
        ds = ds.map(preprocess, num_parallel_calls=autotune, deterministic=deterministic)
    if cache:
        ds = ds.cache(cache if isinstance(cache, str) else "")
    if shuffle_buffer and shuffle_buffer > 1:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    if augment is not None:
        ds = ds.map(augment, num_parallel_calls=autotune, deterministic=deterministic)
    ds = ds.batch(per_batch, drop_remainder=drop_remainder)
    if batch_map is not None:
        ds = ds.map(batch_map, num_parallel_calls=autotune, deterministic=deterministic)
    return ds.prefetch(autotune)
