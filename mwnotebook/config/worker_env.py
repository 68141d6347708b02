"""What each worker gets from the cluster: its environment (:func:`worker_envs`, the one rule for
the cluster and for export) and the code it runs right after it starts (:func:`recipe_code`: the
seed's recipes 3 and 4).

Pure: this module only builds variables and source text; it never imports TensorFlow. The cluster executes
:func:`recipe_code` once in every worker kernel after start (and after every restart), before the
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

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from mwnotebook.config.devices import NO_GPU, visible_devices_per_worker
from mwnotebook.config.roles import Task
from mwnotebook.errors import ConfigError
from mwnotebook.shared.collectives import COLLECTIVE_ENV

if TYPE_CHECKING:
    from mwnotebook.config.spec import ClusterSpec

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
    @property
    def mixed_precision(self) -> str | None: ...

    @property
    def xla(self) -> bool: ...


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


def recipe_code(spec: _RecipeSpec | None = None, *, mixed_precision: str | None = None,
                xla: bool | None = None) -> str:
    """The recipes' part of the source each worker executes after start (all of it:
    ``engine/workers/bootstrap.py`` ``setup_code``); ``""`` when there is nothing to set.

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


def worker_envs(spec: ClusterSpec, addresses: Sequence[str], *, environ: Mapping[str, str] | None = None,
                gpu_count: int | None = None) -> list[dict[str, str]]:
    """The variables each kernel that runs the cell gets on top of its launcher's base environment.

    The one rule: the cluster hands these to its launcher (engine/workers/worker_group.py) and export
    writes them into the launch scripts (export/scripts.py), so a job runs with what the notebook's
    workers had. ``addresses`` are the TF server addresses of every training task, in
    :meth:`RoleLayout.training_tasks` order (for a plain cluster: the workers); ``environ`` is the
    notebook's environment (default ``os.environ``: its ``CUDA_VISIBLE_DEVICES`` is what local
    workers share out) and ``gpu_count`` the machine's GPUs (default: asked from the driver), both
    only read for ``--gpus-per-worker``. Under ``--ps`` the one cell kernel is the coordinator; the
    servers' variables are in :func:`task_envs`. Raises :class:`ConfigError` (too few GPUs) before
    anything starts.
    """
    envs = task_envs(spec, addresses, environ=environ, gpu_count=gpu_count)
    return [envs[task] for task in spec.layout.cell_tasks()]


def task_envs(spec: ClusterSpec, addresses: Sequence[str], *, environ: Mapping[str, str] | None = None,
              gpu_count: int | None = None) -> dict[Task, dict[str, str]]:
    """The variables of every task of the cluster (training tasks, and the evaluator with ``--evaluator``).

    MWMS replica i (``MWNOTEBOOK_WORKER_INDEX``) gets the devices of worker slot i; under ``--ps``
    worker server i gets slot i, while the parameter servers and the coordinator see no GPU (they
    hold variables and schedule steps). Every task of a ``--ps`` cluster gets
    ``GRPC_FAIL_FAST=use_caller``: without it a lost worker is not reported to the coordinator.
    """
    layout = spec.layout
    tasks = layout.training_tasks()
    if len(addresses) != len(tasks):
        raise ConfigError(f"{len(addresses)} addresses for {len(tasks)} TensorFlow tasks "
                          f"({', '.join(t.name for t in tasks)}): give one per task")
    devices = visible_devices_per_worker(spec, environ=environ, gpu_count=gpu_count)
    recipes = recipe_env(spec)
    common: dict[str, str] = {"TF_CPP_MIN_LOG_LEVEL": "2"}
    if spec.use_legacy_keras:
        common["TF_USE_LEGACY_KERAS"] = "1"
    if spec.collective != "auto":  # mw.strategy()'s default
        common[COLLECTIVE_ENV] = spec.collective
    if layout.parameter_server:
        common["GRPC_FAIL_FAST"] = "use_caller"
    everyone = [*tasks, Task("evaluator", 0)] if layout.evaluator else list(tasks)
    cell = layout.cell_tasks()
    out: dict[Task, dict[str, str]] = {}
    for task in everyone:
        env = dict(common)
        if layout.parameter_server:
            visible = devices[task.index] if task.type == "worker" else NO_GPU
        elif task.type == "evaluator":
            visible = devices[0]
        else:
            visible = devices[cell.index(task)]
        # cell kernels are numbered as their outputs are (the evaluator last); servers by their own index
        index = cell.index(task) if task in cell else task.index
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        env.update(spec.env)
        env.update(recipes)  # after the user's own: they extend a --env TF_XLA_FLAGS, never replace it
        if layout.parameter_server and task.type != "worker":
            env["CUDA_VISIBLE_DEVICES"] = NO_GPU
        env["TF_CONFIG"] = layout.tf_config_json(addresses, task)
        env["MWNOTEBOOK_WORKER_INDEX"] = str(index)
        env["MWNOTEBOOK_NUM_WORKERS"] = str(spec.workers)
        out[task] = env
    return out


def recipe_env(spec: ClusterSpec) -> dict[str, str]:
    """Variables a worker needs at process start for the recipes and its devices.

    Applied *after* ``spec.env`` (a user's own ``--env`` value is kept or extended, never lost):

    - ``--xla --cpu``: ``TF_XLA_FLAGS`` gains :data:`CPU_XLA_FLAGS` (appended to a ``--env``
      value), so that auto-clustering also compiles on CPU. Measured: without it, ``set_jit(True)``
      on a CPU worker compiles nothing.
    - several workers sharing the GPUs (no ``--cpu``, no ``--gpus-per-worker``):
      ``TF_FORCE_GPU_ALLOW_GROWTH=true``; otherwise the first worker's TensorFlow reserves nearly
      all GPU memory and the others fail with out-of-memory.
    """
    out: dict[str, str] = {}
    if spec.xla and spec.cpu:
        current = spec.env.get("TF_XLA_FLAGS", "").strip()
        if CPU_XLA_FLAGS not in current.split():
            current = f"{current} {CPU_XLA_FLAGS}".strip()
        out["TF_XLA_FLAGS"] = current
    shared = not spec.cpu and spec.gpus_per_worker is None and spec.workers > 1
    if shared and "TF_FORCE_GPU_ALLOW_GROWTH" not in spec.env:
        out["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    return out


def with_thread_defaults(spec: ClusterSpec, threads: Mapping[str, str]) -> ClusterSpec:
    """``spec`` as its local tasks run under the teacher's CPU cap: ``threads`` (the thread-pool
    variables of config/class_caps.py ``ClassCaps.thread_env``) added as ``--env`` values that the
    user's own ``--env`` overrides; ``spec`` itself when there is nothing to add.

    Through ``--env`` they reach every rule above (each task's environment, the template's start-up
    environment) as a user's value would: ``TF_NUM_*`` are set in each forked worker before its
    runtime starts (launchers/local/template_pool.py ``RUNTIME_ENV``), ``OMP_NUM_THREADS`` is a
    load-time variable (a template of its own per value). Export never sees them: a job runs
    elsewhere, under its own limits."""
    extra = {name: value for name, value in threads.items() if name not in spec.env}
    if not extra:
        return spec
    return dataclasses.replace(spec, env={**extra, **spec.env})


def prestart_env(cpu_share: Mapping[str, str] | None = None) -> dict[str, str]:
    """The start-up environment of the template a notebook starts as the magic loads
    (launchers/local/prestart.py): that of ``ClusterSpec()``, with ``cpu_share`` (the teacher's
    CPU cap's thread variables for its tasks, config/class_caps.py ``ClassCaps.thread_env``) so
    that a capped notebook's first cluster finds that template (``OMP_NUM_THREADS`` is part of a
    template's identity) instead of importing TensorFlow again in a second one."""
    from mwnotebook.config.spec import ClusterSpec  # spec.py's layer; imported when asked

    return startup_env(with_thread_defaults(ClusterSpec(), cpu_share or {}))


def startup_env(spec: ClusterSpec) -> dict[str, str]:
    """The environment every worker of ``spec`` starts with: what decides which worker template
    (local or on a host) can fork it, before the TF addresses are known.

    It is :func:`worker_envs` for placeholder addresses, so it can never drift from the real rule;
    its per-worker values (``TF_CONFIG``, the worker index, a worker's devices) are placeholders
    that the templates leave out of their identity and set in each forked child
    (``launchers/local/template_pool.py`` ``PER_WORKER_ENV``). Raises :class:`ConfigError` as
    :func:`worker_envs` does, before anything starts.
    """
    return worker_envs(spec, ["127.0.0.1:0"] * len(spec.layout.training_tasks()))[0]
