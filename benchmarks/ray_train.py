"""``%%mwtrain --ray`` against Ray Train's own ``TensorflowTrainer`` and against local workers, on the
Ray test cluster (testbed/ray_nodes.py: a head and two worker nodes on loopback addresses), the seed
program (tests/data/seed_train.py) everywhere, side by side in one run.

    pip install 'ray[train]'   # Ray Train's TensorflowTrainer (not a dependency of mwnotebook)
    python -m benchmarks.ray_train [--repeats 3]

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
* ``ray_named_first_s``: the Ray first cell in a fresh kernel whose environment names the cluster
  (``RAY_ADDRESS``, as on a Ray cluster's own notebook): ``%load_ext`` imports Ray on a thread and
  starts no local worker template (launchers/ray/prestart.py).
* ``local_*``: the same cells with local workers in another fresh kernel (``first``, ``rerun``,
  ``restart``).

Every row twice, each on a Ray test cluster of its own: in this Python environment as installed
(``installed_*``), and ``without_rfc3987_syntax_*``: the same environment with the package
``rfc3987_syntax`` hidden (a directory on ``PYTHONPATH`` whose ``rfc3987_syntax`` raises ImportError,
as if it were not installed) for every process: the nodes, Ray Train's driver and workers, the
kernels. Jupyter's jsonschema extra installs it, and jsonschema imports it with ``import ray``,
compiling its grammars: 1.3 of ``import ray``'s 1.4 s here, in the notebook and in every Ray worker
process (docs/guide/ray.md).

The first cells (Ray, Ray with ``RAY_ADDRESS``, local), the noisiest rows, are taken ``--repeats``
times each in fresh kernels, in turns: the table gives their median and range. Each seed cell is
checked for the seed's exact lines. Writes benchmarks/results/ray_train/<commit>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def first_cell(magic: str, env: dict[str, str]) -> float:
    """One first cell: a fresh kernel (``env`` added to its environment), ``%load_ext``, the seed cell."""
    km, kc = start_kernel({"MWNOTEBOOK_TEMPLATE": "1", **env})
    try:
        timed(kc, "%load_ext mwnotebook")
        first = seed_cell(kc, magic)
        timed(kc, "%mwcluster stop", timeout=120)
    finally:
        stop_kernel(km, kc)
    return first


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


ROWS = (("Ray Train `TensorflowTrainer` fit 1", "ray_train_fit1_s", None),
        ("Ray Train `TensorflowTrainer` fit 2", "ray_train_fit2_s", None),
        ("`%%mwtrain --ray` first cell", "ray_first_s", "first"),
        ("`%%mwtrain --ray` first cell, `RAY_ADDRESS` set (Ray imported at `%load_ext`, no local template)",
         "ray_named_first_s", "first"),
        ("`%%mwtrain --ray` rerun", "ray_rerun_s", "rerun"),
        ("`%%mwtrain --ray` second cluster (`--ray-strategy STRICT_SPREAD`: forks from the kept templates)",
         "ray_second_cluster_s", "first"),
        ("`%%mwtrain --ray` second cluster (`--cpus-per-worker 2`: a new template per node)",
         "ray_second_cluster_threads_s", "first"),
        ("`%%mwtrain --ray` restart after a killed worker", "ray_restart_s", "restart"),
        ("local workers first", "local_first_s", "first"),
        ("local workers rerun", "local_rerun_s", "rerun"),
        ("local workers restart", "local_restart_s", "restart"))
#: The environments each row runs in (see the module docstring): (key prefix, column title).
VARIANTS = (("installed", "as installed"), ("without_rfc3987_syntax", "without rfc3987-syntax"))


def table(r: dict[str, Any]) -> str:
    """Seconds, against local workers' same row, against Ray Train's first fit: per environment."""
    head = "| |" + "".join(f" {title}: s | against local | against Ray Train fit 1 |" for _, title in VARIANTS)
    lines = [head, "|---|" + "---|---|---|" * len(VARIANTS)]
    for name, key, base in ROWS:
        line = f"| {name} |"
        for prefix, _ in VARIANTS:
            value, fit1 = r[f"{prefix}_{key}"], r[f"{prefix}_ray_train_fit1_s"]
            local = f"**{value / r[f'{prefix}_local_{base}_s']:.2f}x** local {base}" if base else ""
            runs = r.get(f"{prefix}_{key[:-2]}_runs")
            spread = f" ({min(runs):.1f}-{max(runs):.1f})" if runs and len(runs) > 1 else ""
            line += f" {value:.1f}{spread} | {local} | {value / fit1:.2f}x |"
        lines.append(line)
    return "\n".join(lines)


def without_rfc3987_syntax(directory: str) -> str:
    """A directory for ``PYTHONPATH`` in which ``import rfc3987_syntax`` fails as if it were not
    installed (jsonschema then leaves out its IRI format checks, as it does without the package)."""
    package = os.path.join(directory, "rfc3987_syntax")
    os.makedirs(package, exist_ok=True)
    with open(os.path.join(package, "__init__.py"), "w") as f:
        f.write("raise ImportError('rfc3987_syntax hidden by benchmarks/ray_train.py')\n")
    return directory


def variant_rows(address: str, repeats: int) -> dict[str, Any]:
    """Every row on the Ray cluster at ``address`` (the environment as it is now). The first cells,
    the noisiest rows, ``repeats`` times each in fresh kernels, taken in turns (Ray, Ray with
    ``RAY_ADDRESS``, local): their median, and every sample under ``*_runs``."""
    rows: dict[str, Any] = {}
    fits, _ = ray_train(address)
    rows["ray_train_fit1_s"], rows["ray_train_fit2_s"] = fits
    print(json.dumps(rows), flush=True)
    ray, local = f"%%mwtrain --workers 2 --cpu --ray {address}", "%%mwtrain --workers 2 --cpu"
    rows.update(notebook_rows("ray", ray, {"second_cluster": ray + " --ray-strategy STRICT_SPREAD",
                                           "second_cluster_threads": ray + " --cpus-per-worker 2"}))
    rows.update(notebook_rows("local", local, {}))
    runs: dict[str, list[float]] = {"ray_first": [rows["ray_first_s"]], "ray_named_first": [],
                                    "local_first": [rows["local_first_s"]]}
    for turn in range(repeats):
        if turn:
            runs["ray_first"].append(first_cell(ray, {}))
        runs["ray_named_first"].append(first_cell(ray, {"RAY_ADDRESS": address}))
        if turn:
            runs["local_first"].append(first_cell(local, {}))
        print(json.dumps(runs), flush=True)
    for name, samples in runs.items():
        rows[f"{name}_s"], rows[f"{name}_runs"] = statistics.median(samples), [round(x, 2) for x in samples]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="first cells of each kind, per environment")
    args = parser.parse_args()
    run = Run("ray_train")
    results: dict[str, Any] = {}
    saved = os.environ.get("PYTHONPATH")
    with tempfile.TemporaryDirectory() as hidden:
        for prefix, _ in VARIANTS:
            if prefix == "without_rfc3987_syntax":
                os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [without_rfc3987_syntax(hidden), saved]))
            started = time.monotonic()
            cluster = ray_nodes.create()
            print(f"{prefix}: Ray test cluster at {cluster.address} up in {time.monotonic() - started:.1f} s",
                  flush=True)
            os.environ.update(cluster.env())
            try:
                results.update({f"{prefix}_{k}": v for k, v in variant_rows(cluster.address, args.repeats).items()})
            finally:
                cluster.destroy()
                if saved is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = saved
    results = {k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()}
    results["table"] = table(results)
    path = run.write(results)
    print(results["table"])
    print(f"written: {path}")


if __name__ == "__main__":
    main()
