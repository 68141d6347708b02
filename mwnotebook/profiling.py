"""The seed's "optimize a single device first" checklist, measured.

The same checks are part of ``%%mwtrain --profile DIR`` (``mwnotebook/experiments/profile.py``): each
worker's traced steps are split by its step clock into input, compute and collective, and the input
share is judged by :func:`input_check` with the rule below; the mixed precision and XLA lines of
:func:`checklist` follow. The functions here remain for a single process or one worker's own loop.

"Profile says <5% input bound? Mixed precision on? XLA on? Batch size as large as memory
allows?" :func:`measure_input_bound` answers the first question by timing a real training loop:
for every step it measures the time the loop *waits* in ``next(iterator)`` and the time the step
itself takes, and reports ``wait / (wait + step)``. With a prefetching pipeline the next batch is
ready before the step ends and the wait is near zero; a slow pipeline shows up as wait.
:func:`checklist` adds the other three checks, each with advice; :func:`profile` runs both.

Works in a plain process and inside each worker of ``%%mwtrain`` (each worker profiles its own
input pipeline). TensorFlow is imported lazily, only for the checks that need it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger(__name__)

__all__ = ["FETCH_FLOOR_MS", "INPUT_BOUND_THRESHOLD", "CheckItem", "InputBoundReport", "ProfileReport", "checklist",
           "input_check", "keras_step", "measure_input_bound", "profile", "xla_compiles"]

#: The seed's rule: less than 5% of step time waiting for input.
INPUT_BOUND_THRESHOLD = 0.05

#: Below this wait per step (ms) the "input" time is just the cost of one ``next()`` on a
#: prefetched iterator from Python: 0.15-0.5 ms for a local dataset and ~1 ms for a distributed
#: one, measured on this project's 2-core CPU machines. Steps shorter than ~20 ms therefore read
#: as input bound even with a perfect pipeline; the checklist says so instead of blaming it.
FETCH_FLOOR_MS = 1.5


def _block(result: Any) -> None:
    """Wait until a step's result exists (GPU ops return before they finish)."""
    if result is None:
        return
    try:
        import tensorflow as tf

        leaves = tf.nest.flatten(result, expand_composites=True)
    except Exception:  # not a TF structure: nothing to wait for
        leaves = [result]
    for leaf in leaves:
        numpy = getattr(leaf, "numpy", None)
        if callable(numpy):
            numpy()


@dataclass(frozen=True)
class InputBoundReport:
    """Timing of ``steps`` measured steps (after ``warmup`` unmeasured ones)."""

    steps: int
    input_wait_s: float
    compute_s: float
    threshold: float = INPUT_BOUND_THRESHOLD

    @property
    def share(self) -> float:
        """Fraction of step time spent waiting for input."""
        total = self.input_wait_s + self.compute_s
        return self.input_wait_s / total if total > 0 else 0.0

    @property
    def input_bound(self) -> bool:
        """Whether the wait for input is at least ``threshold`` of the step time (the 5% rule)."""
        return self.share >= self.threshold

    @property
    def steps_per_s(self) -> float:
        """Steps per second of the measured loop, input wait included."""
        total = self.input_wait_s + self.compute_s
        return self.steps / total if total > 0 else float("inf")

    def __str__(self) -> str:
        verdict = "INPUT BOUND" if self.input_bound else "ok"
        return (f"input wait {self.share:.1%} of step time (rule: < {self.threshold:.0%}) -> "
                f"{verdict}; {self.steps} steps, {self.steps_per_s:.1f} steps/s, "
                f"wait {1000 * self.input_wait_s / max(self.steps, 1):.2f} ms/step, "
                f"compute {1000 * self.compute_s / max(self.steps, 1):.2f} ms/step")


def measure_input_bound(data: Iterable[Any], step_fn: Callable[[Any], Any], *, steps: int = 50,
                        warmup: int = 3,
                        threshold: float = INPUT_BOUND_THRESHOLD) -> InputBoundReport:
    """Run ``warmup + steps`` training steps and time input wait vs step.

    ``data``: a dataset, distributed dataset or iterator (``iter`` is called on it once; pass
    ``.repeat()`` data or enough batches). ``step_fn(batch)`` runs one step and should return
    its result (e.g. the loss tensor): the timer waits for it, so asynchronous GPU work is
    counted as step time, not as the next wait. Warmup steps (tracing, first cache fill) are not
    measured.
    """
    if steps < 1 or warmup < 0:
        raise ValueError("steps must be >= 1 and warmup >= 0")
    iterator = iter(data)
    wait = compute = 0.0
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            raise ValueError(f"the data ran out after {i} batches; need {warmup + steps} "
                             "(use .repeat() or fewer steps)") from None
        t1 = time.perf_counter()
        _block(step_fn(batch))
        t2 = time.perf_counter()
        if i >= warmup:
            wait += t1 - t0
            compute += t2 - t1
    report = InputBoundReport(steps, wait, compute, threshold)
    log.info("%s", report)
    return report


def keras_step(model: Any) -> Callable[[Any], Any]:
    """A ``step_fn`` for :func:`measure_input_bound` that trains a compiled Keras model."""
    def step(batch: Any) -> Any:
        if isinstance(batch, (tuple, list)):
            return model.train_on_batch(*batch[:3], return_dict=False)
        return model.train_on_batch(batch, return_dict=False)

    return step


def xla_compiles(fn: Callable[..., Any], *args: Any) -> bool:
    """Whether auto-clustering (``--xla``) runs ``fn(*args)`` (a ``tf.function``) through XLA.

    Runs it once with run metadata on and looks for XLA's ``_XlaCompile``/``_XlaRun`` ops in
    the graphs TensorFlow actually executed. Auto-clustering (``--xla``) only shows up here, not
    in any flag: on a CPU worker ``set_jit(True)`` alone compiles nothing (measured), which is
    why ``--xla --cpu`` also sets ``TF_XLA_FLAGS=--tf_xla_cpu_global_jit``. Functions with
    ``jit_compile=True`` run through another path and are not seen here.
    """
    from tensorflow.python.eager import context  # run metadata has no public TF2 API

    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        _block(fn(*args))
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    ops = {node.op for fg in metadata.function_graphs for graph in fg.partition_graphs
           for node in graph.node}
    return bool(ops & {"_XlaCompile", "_XlaRun", "XlaLaunch"})


@dataclass(frozen=True)
class CheckItem:
    """One line of the checklist: ``status`` is ``"ok"``, ``"advice"`` or ``"unknown"``."""

    name: str
    status: Literal["ok", "advice", "unknown"]
    detail: str
    advice: str = ""

    def __str__(self) -> str:
        mark = {"ok": "[x]", "advice": "[ ]", "unknown": "[?]"}.get(self.status, "[ ]")
        text = f"{mark} {self.name}: {self.detail}"
        return f"{text}\n      -> {self.advice}" if self.advice else text


def input_check(report: InputBoundReport | None) -> CheckItem:
    """The checklist's first line: the input-bound rule on ``report``, with advice when it fails."""
    name = f"input bound < {INPUT_BOUND_THRESHOLD:.0%}"
    if report is None:
        return CheckItem(name, "unknown", "not measured",
                         "run the training cell with %%mwtrain --profile DIR, or "
                         "mwnotebook.profiling.measure_input_bound(dataset, step_fn) in one process")
    if not report.input_bound:
        return CheckItem(name, "ok", f"{report.share:.1%} of step time waiting for input")
    wait_ms = 1000 * report.input_wait_s / max(report.steps, 1)
    if wait_ms < FETCH_FLOOR_MS:
        return CheckItem(
            name, "advice", f"{report.share:.1%} of step time waiting for input, but only "
            f"{wait_ms:.2f} ms per step",
            "that is about the fixed cost of fetching one batch from Python, so the pipeline is "
            "keeping up and the step is short: give each step more work (a larger batch) rather "
            "than tuning the pipeline.")
    return CheckItem(
        name, "advice", f"{report.share:.1%} of step time waiting for input",
        "build the pipeline with mwnotebook.recipes.input_pipeline: deterministic preprocessing "
        "in map(num_parallel_calls=AUTOTUNE) before cache(), shuffle after the cache, "
        "prefetch(AUTOTUNE) last; move slow Python (py_function) out of the pipeline.")


def _mixed_precision_item(tf: Any, model: Any, gpus: int) -> CheckItem:
    policy = getattr(model, "dtype_policy", None) if model is not None else None
    name = getattr(policy, "name", None) or tf.keras.mixed_precision.global_policy().name
    if name.startswith("mixed_"):
        if name == "mixed_float16" and gpus == 0:
            return CheckItem("mixed precision", "advice", f"policy {name} on a CPU-only worker",
                             "float16 is slow on CPUs: use --mixed-precision bfloat16 or none here")
        return CheckItem("mixed precision", "ok", f"policy {name}")
    return CheckItem(
        "mixed precision", "advice", f"policy {name}",
        "%%mwtrain --mixed-precision float16 (GPUs with tensor cores) or bfloat16 (TPU, Ampere+ "
        "GPUs, recent CPUs); keep the last layer in float32 (dtype='float32'); with a custom "
        "loop, wrap the optimizer in LossScaleOptimizer for float16.")


def _xla_item(tf: Any, model: Any) -> CheckItem:
    jit = tf.config.optimizer.get_jit()
    model_jit = getattr(model, "jit_compile", None) if model is not None else None
    if model_jit:
        return CheckItem("XLA", "ok", "model compiled with jit_compile=True")
    if jit:
        return CheckItem("XLA", "ok", f"auto-clustering on ({jit})")
    return CheckItem("XLA", "advice", "off",
                     "%%mwtrain --xla, or model.compile(..., jit_compile=True) / "
                     "@tf.function(jit_compile=True) on the train step.")


def _batch_item(tf: Any, per_replica_batch: int | None, gpus: int) -> CheckItem:
    if per_replica_batch is None:
        return CheckItem("batch size", "unknown", "not given",
                         "pass per_replica_batch=...; grow it until memory runs out")
    detail = f"{per_replica_batch} per replica"
    notes: list[str] = []
    if gpus:
        try:
            info = tf.config.experimental.get_memory_info("GPU:0")
            detail += f", GPU:0 peak memory {info['peak'] / 2**30:.2f} GiB"
        except (ValueError, RuntimeError):
            pass
        if per_replica_batch % 8:
            notes.append("use a multiple of 8 so float16 matmuls map onto tensor cores")
    if per_replica_batch < 64:
        notes.append("double the per-replica batch while it fits in memory (the seed uses 64), "
                     "and scale the LR linearly with warmup (mwnotebook.recipes.WarmupCosine)")
    if notes:
        return CheckItem("batch size", "advice", detail, "; ".join(notes))
    return CheckItem("batch size", "ok", detail,
                     "keep doubling while it fits; keep the LR scaled (recipes.WarmupCosine)")


def checklist(*, report: InputBoundReport | None = None, model: Any = None,
              per_replica_batch: int | None = None) -> list[CheckItem]:
    """The seed's four single-device checks, in its order, each with advice."""
    import tensorflow as tf

    gpus = len(tf.config.list_physical_devices("GPU"))
    return [input_check(report), _mixed_precision_item(tf, model, gpus), _xla_item(tf, model),
            _batch_item(tf, per_replica_batch, gpus)]


@dataclass(frozen=True)
class ProfileReport:
    """What :func:`profile` found: the input-bound measurement and the checklist's items; printed, one
    line each."""

    input: InputBoundReport
    items: list[CheckItem] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join([str(self.input), *map(str, self.items)])


def profile(data: Iterable[Any], step_fn: Callable[[Any], Any] | None = None, *, model: Any = None,
            per_replica_batch: int | None = None, steps: int = 50,
            warmup: int = 3) -> ProfileReport:
    """:func:`measure_input_bound` plus :func:`checklist`; ``step_fn`` defaults to training ``model``."""
    if step_fn is None:
        if model is None:
            raise ValueError("give step_fn or a compiled Keras model")
        step_fn = keras_step(model)
    report = measure_input_bound(data, step_fn, steps=steps, warmup=warmup)
    return ProfileReport(report, checklist(report=report, model=model,
                                           per_replica_batch=per_replica_batch))
