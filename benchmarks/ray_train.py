"""``%%mwtrain --ray`` against Ray Train's own ``TensorflowTrainer`` and against local workers, on the
Ray test cluster (testbed/ray_nodes.py: a head and two worker nodes on loopback addresses), the seed
program (tests/data/seed_train.py) everywhere, side by side in one run.

    pip install 'ray[train]'   # Ray Train's TensorflowTrainer (not a dependency of mwnotebook)
    python -m benchmarks.ray_train

Rows (wall clocks of one machine; each a single measurement):

* ``ray_train_fit1_s`` / ``ray_train_fit2_s``: ``TensorflowTrainer(train_loop = the seed program,
  2 workers of 1 CPU).fit()`` twice from a driver of its own (a fresh process; Ray Train starts new
  worker actors for every fit).
* ``ray_*``: a fresh notebook kernel, ``%load_ext mwnotebook``, then ``%%mwtrain --workers 2 --cpu
  --ray ADDRESS`` + the seed: ``first`` (the cluster starts: relays, a worker template per node,
  kernels forked), ``rerun`` (the same cell again), ``second_cluster`` (other options,
  ``--ray-strategy STRICT_SPREAD``: a new cluster, its workers forked from the node templates the
  first one left: launchers/ray/node_templates.py), ``second_cluster_threads`` (``--cpus-per-worker
  2``: other thread counts, which numpy's BLAS reads as it loads, so a new template per node),
  ``restart`` (worker 1 SIGKILLs itself in a cell; the next seed cell, which starts the lost worker
  again).
* ``local_*``: the same cells with local workers in another fresh kernel (``first``, ``rerun``,
  ``restart``).

Each seed cell is checked for the seed's exact lines. Writes benchmarks/results/ray_train/<commit>.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

from benchmarks._suite import SEED_CODE, SEED_LINE, Run, cell, start_kernel, stop_kernel, timed
from testbed import ray_nodes

KILL_WORKER_1 = ("import os, signal, time\nif os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n"
                 "    os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(30)")

#: Ray Train's driver: the seed program as each worker's train loop (Ray Train sets its TF_CONFIG).
RAY_TRAIN_DRIVER = textwrap.dedent("""
    import json, sys, tempfile, time
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    seed = open(sys.argv[2]).read()

    def train_loop(config):
        exec(compile(seed, "seed_train.py", "exec"), {"__name__": "__main__"})

    ray.init(address=sys.argv[1], log_to_driver=True,
             runtime_env={"env_vars": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}})
    times = []
    for fit in range(2):
        trainer = TensorflowTrainer(train_loop, scaling_config=ScalingConfig(
            num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
            run_config=RunConfig(name=f"seed{fit}", storage_path=tempfile.mkdtemp()))
        started = time.perf_counter()
        trainer.fit()
        times.append(time.perf_counter() - started)
    print("@@" + json.dumps(times), flush=True)
""")


def ray_train(address: str) -> tuple[list[float], str]:
    with tempfile.TemporaryDirectory() as tmp:
        driver, seed = os.path.join(tmp, "driver.py"), os.path.join(tmp, "seed.py")
        with open(driver, "w") as f:
            f.write(RAY_TRAIN_DRIVER)
        with open(seed, "w") as f:
            f.write(SEED_CODE)
        done = subprocess.run([sys.executable, driver, address, seed], capture_output=True, text=True,
                              timeout=1200)
    out = done.stdout + done.stderr
    if done.returncode != 0 or "@@" not in done.stdout:
        raise RuntimeError(f"Ray Train's driver failed:\n{out[-4000:]}")
    return list(json.loads(done.stdout[done.stdout.rindex("@@") + 2:])), out


def seed_cell(kc: Any, magic: str) -> float:
    """The seed as one ``%%mwtrain`` cell: its seconds, after checking both workers' exact lines."""
    wall, out = cell(kc, magic + "\n" + SEED_CODE, timeout=900)
    for i in range(2):
        if f"[worker {i}] {SEED_LINE.format(i=i)}" not in out:
            raise RuntimeError(f"{magic!r}: worker {i}'s seed line is missing:\n{out[-3000:]}")
    return wall


def restart(kc: Any, magic: str) -> float:
    """Worker 1 kills itself; then the seed cell, timed (it starts the lost worker again)."""
    try:
        cell(kc, magic + "\n" + KILL_WORKER_1, timeout=300)
    except RuntimeError:
        pass  # the cell fails: worker 1 died
    return seed_cell(kc, magic)


def notebook_rows(prefix: str, magic: str, others: dict[str, str]) -> dict[str, float]:
    km, kc = start_kernel({"MWNOTEBOOK_TEMPLATE": "1"})
    rows: dict[str, float] = {}
    try:
        timed(kc, "%load_ext mwnotebook")
        rows[f"{prefix}_first_s"] = seed_cell(kc, magic)
        rows[f"{prefix}_rerun_s"] = seed_cell(kc, magic)
        for name, other in others.items():
            timed(kc, "%mwcluster stop", timeout=120)
            rows[f"{prefix}_{name}_s"] = seed_cell(kc, other)
        if others:
            timed(kc, "%mwcluster stop", timeout=120)
            seed_cell(kc, magic)  # back to the first options (not timed: a new cluster again)
        rows[f"{prefix}_restart_s"] = restart(kc, magic)
        timed(kc, "%mwcluster stop", timeout=120)
    finally:
        stop_kernel(km, kc)
    print(json.dumps(rows), flush=True)
    return rows


def table(r: dict[str, float]) -> str:
    local = {k: r[f"local_{k}_s"] for k in ("first", "rerun", "restart")}
    lines = ["| | seconds | against local | against Ray Train fit 1 |", "|---|---|---|---|"]
    lines.append(f"| Ray Train `TensorflowTrainer` fit 1 | {r['ray_train_fit1_s']:.1f} | | 1.00x |")
    lines.append(f"| Ray Train `TensorflowTrainer` fit 2 | {r['ray_train_fit2_s']:.1f} | | "
                 f"{r['ray_train_fit2_s'] / r['ray_train_fit1_s']:.2f}x |")
    for name, key, base in (("first cell", "ray_first_s", "first"), ("rerun", "ray_rerun_s", "rerun"),
                            ("second cluster (`--ray-strategy STRICT_SPREAD`)", "ray_second_cluster_s", "first"),
                            ("second cluster (`--cpus-per-worker 2`)", "ray_second_cluster_threads_s", "first"),
                            ("restart after a killed worker", "ray_restart_s", "restart")):
        lines.append(f"| `%%mwtrain --ray` {name} | {r[key]:.1f} | {r[key] / local[base]:.2f}x local {base} | "
                     f"{r[key] / r['ray_train_fit1_s']:.2f}x |")
    for name in ("first", "rerun", "restart"):
        lines.append(f"| local workers {name} | {local[name]:.1f} | 1.00x | "
                     f"{local[name] / r['ray_train_fit1_s']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    run = Run("ray_train")
    started = time.monotonic()
    cluster = ray_nodes.create()
    print(f"Ray test cluster at {cluster.address} up in {time.monotonic() - started:.1f} s", flush=True)
    os.environ.update(cluster.env())
    results: dict[str, Any] = {}
    try:
        fits, _ = ray_train(cluster.address)
        results["ray_train_fit1_s"], results["ray_train_fit2_s"] = fits
        print(json.dumps(results), flush=True)
        ray = f"%%mwtrain --workers 2 --cpu --ray {cluster.address}"
        results.update(notebook_rows("ray", ray, {"second_cluster": ray + " --ray-strategy STRICT_SPREAD",
                                                  "second_cluster_threads": ray + " --cpus-per-worker 2"}))
        results.update(notebook_rows("local", "%%mwtrain --workers 2 --cpu", {}))
    finally:
        cluster.destroy()
    results = {k: round(v, 2) for k, v in results.items()}
    results["table"] = table(results)
    path = run.write(results)
    print(results["table"])
    print(f"written: {path}")


if __name__ == "__main__":
    main()
