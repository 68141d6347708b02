"""Code the cluster runs in each worker right after it starts: the seed's recipes 3 and 4.

Pure: this module only builds source text; it never imports TensorFlow. The cluster executes
:func:`setup_code` once in every worker kernel after start (and after every restart), before the
first user cell, so ``--mixed-precision`` and ``--xla`` hold for everything the cell builds.

Why it is safe to run before the user's ``MultiWorkerMirroredStrategy``: collective ops must be
configured before the TensorFlow runtime initialises (any TF op before the strategy gives
``RuntimeError: Collective ops must be configured at program startup``). The snippet only touches
process-level settings that do not initialise the runtime:

- ``tf.keras.mixed_precision.set_global_policy(...)`` stores a Python object and flips a flag;
  it creates no tensor (measured: a two-worker MWMS created afterwards works,
  tests/tf/test_recipes_tf.py).
- ``tf.config.optimizer.set_jit(True)`` records the global JIT level for the context that will be
  created later; it does not create it.

The snippet defines and deletes one function so that the user's namespace stays clean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from mwnotebook.errors import ConfigError

#: ``--mixed-precision`` values and the Keras policy each one sets.
POLICIES: dict[str, str] = {
    "float16": "mixed_float16",   # GPUs with tensor cores (compute capability >= 7.0)
    "bfloat16": "mixed_bfloat16",  # TPUs, Ampere+ GPUs, recent CPUs
}

#: Extra ``TF_XLA_FLAGS`` for ``--xla`` on CPU-only workers: ``set_jit(True)`` alone enables
#: auto-clustering for GPU only; this flag extends it to the CPU device. Parsed once when
#: TensorFlow loads, so it must be in the worker's environment at process start.
CPU_XLA_FLAGS = "--tf_xla_cpu_global_jit"


class _RecipeSpec(Protocol):
    mixed_precision: str | None
    xla: bool


def policy_name(mixed_precision: str | None) -> str | None:
    """The Keras policy for a ``--mixed-precision`` value (``None`` = leave float32)."""
    if mixed_precision is None or mixed_precision == "":
        return None
    value = mixed_precision.strip().lower()
    if value in POLICIES:
        return POLICIES[value]
    if value in POLICIES.values():
        return value
    choices = ", ".join(sorted(POLICIES))
    raise ConfigError(f"--mixed-precision must be one of {choices} (got {mixed_precision!r})")


def setup_code(spec: _RecipeSpec | None = None, *, mixed_precision: str | None = None,
               xla: bool | None = None) -> str:
    """Python source each worker executes after start; ``""`` when there is nothing to set.

    Reads ``spec.mixed_precision`` and ``spec.xla`` (a :class:`mwnotebook.ClusterSpec`); the
    keyword arguments override them. Raises :class:`ConfigError` for an unknown precision.
    """
    mp = mixed_precision if mixed_precision is not None else getattr(spec, "mixed_precision", None)
    use_xla = bool(xla if xla is not None else getattr(spec, "xla", False))
    policy = policy_name(mp)
    if policy is None and not use_xla:
        return ""
    lines = ["def __mwnotebook_setup():",
             "    import tensorflow as tf"]
    if policy is not None:
        lines.append(f"    tf.keras.mixed_precision.set_global_policy({policy!r})")
    if use_xla:
        lines.append("    tf.config.optimizer.set_jit(True)")
    lines += ["__mwnotebook_setup()", "del __mwnotebook_setup", ""]
    return "\n".join(lines)


def worker_env(spec: Any = None, *, xla: bool | None = None, cpu: bool | None = None,
               environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables a worker needs at process start for the recipes and its devices.

    Apply *after* ``spec.env`` (a user's own ``--env`` value is kept or extended, never lost):

    - ``--xla --cpu``: ``TF_XLA_FLAGS`` gains :data:`CPU_XLA_FLAGS` (appended to a value from
      ``environ`` or ``spec.env``), so that auto-clustering also compiles on CPU. Measured:
      without it, ``set_jit(True)`` on a CPU worker compiles nothing.
    - several workers sharing the GPUs (no ``--cpu``, no ``--gpus-per-worker``):
      ``TF_FORCE_GPU_ALLOW_GROWTH=true``; otherwise the first worker's TensorFlow reserves nearly
      all GPU memory and the others fail with out-of-memory.
    """
    use_xla = bool(xla if xla is not None else getattr(spec, "xla", False))
    on_cpu = bool(cpu if cpu is not None else getattr(spec, "cpu", False))
    user_env: Mapping[str, str] = getattr(spec, "env", None) or {}
    out: dict[str, str] = {}
    if use_xla and on_cpu:
        current = (user_env.get("TF_XLA_FLAGS") or (environ or {}).get("TF_XLA_FLAGS", "")).strip()
        if CPU_XLA_FLAGS not in current.split():
            current = f"{current} {CPU_XLA_FLAGS}".strip()
        out["TF_XLA_FLAGS"] = current
    shared = (spec is not None and not on_cpu and getattr(spec, "gpus_per_worker", None) is None
              and getattr(spec, "workers", 1) > 1)
    if shared and "TF_FORCE_GPU_ALLOW_GROWTH" not in user_env:
        out["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    return out
