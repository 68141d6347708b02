"""Measurements taken *inside* the notebook kernel for ``noop_breakdown.py`` (imported there by a cell).

Everything returns plain dicts of milliseconds (medians), so the driver can print and store them.
"""

from __future__ import annotations

import asyncio
import cProfile
import datetime
import pstats
import statistics
import time
from typing import Any

from mwnotebook.engine.workers.bootstrap import SETTLE_EXPRESSION


def _median_ms(samples: list[float]) -> float:
    return round(1000 * statistics.median(samples), 3)


def _timed(fn: Any, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return _median_ms(samples)


def inside(cluster: Any, repeats: int) -> dict[str, float]:
    """A no-op through each layer, timed in the notebook kernel (no notebook round trip)."""
    from IPython import get_ipython

    shell = get_ipython()
    n = cluster.spec.workers
    core, loop = cluster._core, cluster._loop  # noqa: SLF001 (a probe of the cluster's private core)
    workers = cluster.workers

    async def raw(silent: bool, expressions: dict[str, str] | None) -> float:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            await asyncio.gather(*(w.execute("pass", lambda _m: None, silent=silent, user_expressions=expressions)
                                   for w in workers))
            samples.append(time.perf_counter() - started)
        return _median_ms(samples)

    async def core_runs() -> float:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            await core.run("pass")
            samples.append(time.perf_counter() - started)
        return _median_ms(samples)

    out = {"magic_call": _timed(lambda: shell.run_cell_magic("mwtrain", f"--workers {n} --cpu", "pass"), repeats),
           "cluster_run": _timed(lambda: cluster.run("pass"), repeats),
           "async_core_run": loop.run(core_runs()),
           "raw_silent": loop.run(raw(True, None)),
           "raw_output_count": loop.run(raw(False, None)),
           "raw_output_count_settle": loop.run(raw(False, {"settle": SETTLE_EXPRESSION}))}
    out.update(kernel_split(cluster, repeats))
    return out


def kernel_split(cluster: Any, repeats: int) -> dict[str, float]:
    """Per worker request: client -> kernel start of handling, handling, reply -> client (wall clock).

    ``started`` is ipykernel's execute_reply metadata (when its handler began); the reply header's
    date is when the reply was made. Medians over workers and repeats.
    """
    loop, workers = cluster._loop, cluster.workers  # noqa: SLF001 (the cluster's event loop thread)

    async def one(w: Any) -> tuple[float, float, float]:
        sent = time.time()
        msg_id = w.client.execute("pass", silent=False, store_history=True, allow_stdin=False)
        reply = await w._reply_for(msg_id, "execute_reply", timeout=30)  # noqa: SLF001 (a probe of the cluster's private core)
        received = time.time()
        started = _seconds(reply["metadata"].get("started"))
        made = _seconds(reply["header"]["date"])
        await asyncio.sleep(0)  # let IOPub's idle pass through the reader
        return started - sent, made - started, received - made

    async def run() -> dict[str, float]:
        to, handling, back = [], [], []
        for _ in range(repeats):
            for a, b, c in await asyncio.gather(*(one(w) for w in workers)):
                to.append(a)
                handling.append(b)
                back.append(c)
            await asyncio.sleep(0.005)
        return {"request_to_kernel_handler": _median_ms(to), "kernel_handler": _median_ms(handling),
                "reply_to_client": _median_ms(back)}

    return loop.run(run())


def _seconds(stamp: Any) -> float:
    if isinstance(stamp, str):
        stamp = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return stamp.timestamp()


#: Timed in each worker: its per-cell hooks, and IPython's own part of a no-op cell.
WORKER_PROBE = r"""
import timeit as _t, json as _j, gc as _gc, os as _os, threading as _th
import mwnotebook.worker._lifetime as _l, mwnotebook.processes.runtime.output as _o
_sh = get_ipython()
_ex = {"settle": "__import__('mwnotebook.worker._lifetime', fromlist=['settle']).settle()",
       "_mw_output_written": "__import__('mwnotebook.processes.runtime.output', fromlist=['written']).written()"}
def _ms(fn, n=200):
    return round(min(_t.repeat(fn, number=n, repeat=3)) / n * 1000, 4)
_r = {"hold_namespace": _ms(lambda: (_l._hold_namespace(), _l._held.clear())),
      "settle": _ms(_l.settle), "written": _ms(_o.written),
      "user_expressions_both": _ms(lambda: _sh.user_expressions(_ex)),
      "ipython_run_cell_pass": _ms(lambda: _sh.run_cell("pass", store_history=False, silent=True), 50),
      "gc_objects": len(_gc.get_objects()), "gc_frozen": _gc.get_freeze_count(),
      "gc_collect_full_ms": round(1000 * _t.timeit(_gc.collect, number=1), 2),
      "python_threads": _th.active_count(), "os_threads": len(_os.listdir('/proc/self/task'))}
print(_j.dumps(_r))
del _t, _j, _gc, _os, _th, _l, _o, _sh, _ex, _ms, _r
"""


def worker_probe(cluster: Any) -> list[dict[str, Any]]:
    import json

    return [json.loads(a) if a else {} for a in cluster.query(WORKER_PROBE, timeout=120)]


#: Functions of the magic's path whose cumulative time per call is reported by :func:`profile_magic`.
PROFILED = ("mwtrain", "_parse", "_spec", "cluster_for", "_output_sink", "begin_cell", "announce", "run",
            "_finish", "__init__")


def profile_magic(cluster: Any, repeats: int) -> dict[str, float]:
    """cProfile over ``repeats`` magic calls: cumulative ms per call of the magic's own steps
    (inflated by the profiler; read the proportions)."""
    from IPython import get_ipython

    shell = get_ipython()
    n = cluster.spec.workers
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeats):
        shell.run_cell_magic("mwtrain", f"--workers {n} --cpu", "pass")
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for (path, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.items():
        if "mwnotebook" not in path:
            continue
        short = path.split("mwnotebook/")[-1]
        if name in PROFILED and short.startswith(("frontend/notebook", "engine/cluster.py")):
            key = f"{short}:{name}"
            out[key] = round(1000 * ct / repeats, 3)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def inside_raw(cluster: Any, repeats: int) -> float:
    """Raw execute round trips (with the output count, as every cell has) to all workers at once."""
    loop, workers = cluster._loop, cluster.workers  # noqa: SLF001 (the cluster's event loop thread)

    async def raw() -> float:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            await asyncio.gather(*(w.execute("pass", lambda _m: None) for w in workers))
            samples.append(time.perf_counter() - started)
        return _median_ms(samples)

    loop.run(raw())  # warm
    return loop.run(raw())
