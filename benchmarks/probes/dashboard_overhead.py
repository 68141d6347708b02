"""What live curves cost a training loop: ``mw.report`` every step with the dashboard on, vs. not.

Runs the real thing: a notebook kernel (jupyter_client) executes ``%%mwtrain --workers 2 --cpu``
cells, exactly what a user's notebook does. The workers keep one model between cells; the
benchmark alternates

* ``off``: ``%%mwtrain ... --no-dashboard``, the loop without any ``mw.report``;
* ``on``:  ``%%mwtrain ...`` with the live dashboard, ``mw.report(step, loss=..., global_loss=...)``
  every step;
* ``report_only`` (diagnostic): ``mw.report`` every step, ``--no-dashboard`` (the worker-side cost);

several times and compares medians of the loop's wall time as the workers measure it (the slower
of the two workers), side by side in one run. The frontend update rate is counted from the
messages the notebook kernel actually sends to the browser: display updates of the live chart
(``update_display_data`` carrying its SVG picture), with their sizes.

Usage: python -m benchmarks.probes.dashboard_overhead [--steps 1000] [--repeats 3]
Writes benchmarks/results/dashboard_overhead/<commit>.json. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import platform
import re
import statistics
import sys
import time

import psutil
from jupyter_client.manager import start_new_kernel

from benchmarks._suite import write_result

SETUP = '''%%mwtrain --workers 2 --cpu
import time
import numpy as np
import tensorflow as tf
import mwnotebook.worker as mw

strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(7)
global_batch_size = 16 * strategy.num_replicas_in_sync
rng = np.random.default_rng(7)
features = rng.normal(size=(1024, 8)).astype("float32")
labels = (features[:, 0] - features[:, 1] > 0).astype("float32")[:, None]

def dataset_fn(ctx):
    return (tf.data.Dataset.from_tensor_slices((features, labels))
            .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .repeat().batch(ctx.get_per_replica_batch_size(global_batch_size)).prefetch(8))

iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    optimizer = tf.keras.optimizers.SGD(0.05)
    loss_object = tf.keras.losses.BinaryCrossentropy(reduction=tf.keras.losses.Reduction.NONE)

@tf.function
def train_step(iterator):
    def replica_step(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            per_example = loss_object(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss, tf.reduce_mean(per_example)
    scaled, local = strategy.run(replica_step, args=(next(iterator),))
    return strategy.reduce("SUM", scaled, axis=None), strategy.experimental_local_results(local)[0]

for _ in range(50):  # warm-up: tracing, collectives, thread pools
    train_step(iterator)
print("ready")
'''

LOOP_ON = '''%%mwtrain --workers 2 --cpu
start = time.perf_counter()
for step in range({steps}):
    global_loss, local_loss = train_step(iterator)
    mw.report(step=step, loss=local_loss, global_loss=global_loss)
print("LOOP", time.perf_counter() - start, float(global_loss))
'''

LOOP_REPORT_ONLY = '''%%mwtrain --workers 2 --cpu --no-dashboard
start = time.perf_counter()
for step in range({steps}):
    global_loss, local_loss = train_step(iterator)
    mw.report(step=step, loss=local_loss, global_loss=global_loss)
print("LOOP", time.perf_counter() - start, float(global_loss))
'''

LOOP_OFF = '''%%mwtrain --workers 2 --cpu --no-dashboard
start = time.perf_counter()
for step in range({steps}):
    global_loss, local_loss = train_step(iterator)
print("LOOP", time.perf_counter() - start, float(global_loss))
'''


def run_cell(client, code: str, timeout: float = 600) -> dict:
    """Execute one cell; return its stdout, wall time and the chart updates sent to the frontend."""
    msg_id = client.execute(code)
    started = time.monotonic()
    stdout, errors, figure_updates, update_bytes, comm_msgs = [], [], [], [], 0
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            stdout.append(content["text"])
        elif kind == "error":
            errors.append("\n".join(content["traceback"]))
        elif kind == "comm_msg":
            comm_msgs += 1
        elif kind == "update_display_data" and "mw-live-chart" in content["data"].get("text/html", ""):
            # when the kernel sent it (its header's date), not when it arrived here
            figure_updates.append(msg["header"]["date"].timestamp())
            update_bytes.append(len(content["data"]["text/html"]))
        elif kind == "status" and content["execution_state"] == "idle":
            break
    client.get_shell_msg(timeout=timeout)
    if errors:
        raise RuntimeError(f"cell failed:\n{errors[0]}")
    return {"stdout": "".join(stdout), "wall": time.monotonic() - started,
            "figure_updates": figure_updates, "update_bytes": update_bytes, "comm_msgs": comm_msgs}


def loop_seconds(stdout: str) -> float:
    """The slower worker's loop time (a synchronous cluster runs at the pace of its slowest)."""
    times = [float(t) for t in re.findall(r"^\[worker \d+\] LOOP ([\d.]+)", stdout, re.M)]
    if len(times) != 2:
        raise RuntimeError(f"expected two LOOP lines, got:\n{stdout[-2000:]}")
    return max(times)


def worker_processes(notebook: psutil.Process) -> list[psutil.Process]:
    return [p for p in notebook.children(recursive=True)
            if "mwnotebook.processes.worker_kernel" in " ".join(p.cmdline())]


def cpu_seconds(processes: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def busiest_second(times: list[float]) -> int:
    return max((sum(1 for t in times if s <= t < s + 1.0) for s in times), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    km, client = start_new_kernel(kernel_name="python3")
    try:
        run_cell(client, "%load_ext mwnotebook")
        setup = run_cell(client, SETUP)
        if "ready" not in setup["stdout"]:
            raise RuntimeError(setup["stdout"][-2000:])
        notebook = psutil.Process(km.provisioner.process.pid)  # the notebook kernel (relay + dashboard)
        samples: dict[str, list[float]] = {"off": [], "on": [], "report_only": []}
        notebook_cpu: dict[str, list[float]] = {mode: [] for mode in samples}
        workers = worker_processes(notebook)
        worker_cpu: dict[str, list[float]] = {mode: [] for mode in samples}
        rates, bursts, updates, sizes = [], [], [], []
        for _ in range(args.repeats):
            for mode, template in (("off", LOOP_OFF), ("on", LOOP_ON), ("report_only", LOOP_REPORT_ONLY)):
                cpu_before = sum(notebook.cpu_times()[:2])
                workers_before = cpu_seconds(workers)
                cell = run_cell(client, template.format(steps=args.steps))
                # CPU both workers used per step (less sensitive to other load than wall time)
                worker_cpu[mode].append(1000 * (cpu_seconds(workers) - workers_before) / args.steps)
                samples[mode].append(loop_seconds(cell["stdout"]))
                # CPU the notebook kernel used per second of the cell (1.0 = one core busy)
                notebook_cpu[mode].append((sum(notebook.cpu_times()[:2]) - cpu_before) / cell["wall"])
                if mode == "on":
                    times = cell["figure_updates"]
                    updates.append(len(times))
                    if len(times) > 1:
                        rates.append((len(times) - 1) / (times[-1] - times[0]))
                    bursts.append(busiest_second(times))
                    sizes.extend(cell["update_bytes"])
                print(f"{mode:>11}: loop {samples[mode][-1]:.3f} s", file=sys.stderr, flush=True)
        run_cell(client, "%mwcluster stop")
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=False)

    off, on = statistics.median(samples["off"]), statistics.median(samples["on"])
    best_off, best_on = min(samples["off"]), min(samples["on"])
    result = {
        "benchmark": "dashboard_overhead",
        "steps": args.steps,
        "repeats": args.repeats,
        "workers": 2,
        "loop_seconds_off": samples["off"],
        "loop_seconds_on": samples["on"],
        "loop_seconds_report_only": samples["report_only"],
        "median_step_ms_off": 1000 * off / args.steps,
        "median_step_ms_on": 1000 * on / args.steps,
        "wall_time_ratio": on / off,
        "wall_time_ratio_of_fastest_runs": best_on / best_off,
        # each "on" run against the "off" run just before it: less sensitive to slow drifts in load
        "wall_time_ratio_median_of_pairs": statistics.median(a / b for a, b in zip(samples["on"], samples["off"])),
        "wall_time_ratio_report_only": statistics.median(samples["report_only"]) / off,
        "target_ratio": 1.05,
        "noise_off_runs_max_over_min": max(samples["off"]) / min(samples["off"]),
        "worker_cpu_ms_per_step_median": {m: statistics.median(v) for m, v in worker_cpu.items()},
        "notebook_kernel_cpu_cores_median": {m: statistics.median(v) for m, v in notebook_cpu.items()},
        "frontend_updates_per_run": updates,
        "frontend_update_rate_per_s": statistics.median(rates) if rates else 0.0,
        "frontend_max_updates_in_any_1s": max(bursts) if bursts else 0,
        "chart_update_bytes_median": statistics.median(sizes) if sizes else 0,
        "chart_update_bytes_max": max(sizes) if sizes else 0,
        "machine": f"{platform.machine()} {platform.python_version()}",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = write_result("dashboard_overhead", result)
    print(f"wall-time ratio (dashboard on + mw.report every step / no reporting): {result['wall_time_ratio']:.3f}"
          f" median, {result['wall_time_ratio_median_of_pairs']:.3f} median of paired runs,"
          f" {result['wall_time_ratio_of_fastest_runs']:.3f} fastest runs"
          f"  (target <= 1.05; median step {result['median_step_ms_off']:.2f} ms off,"
          f" {result['median_step_ms_on']:.2f} ms on)")
    print(f"report only (no dashboard) ratio: {result['wall_time_ratio_report_only']:.3f};"
          f" run-to-run noise of the 'off' loop (max/min): {result['noise_off_runs_max_over_min']:.2f}")
    cpu = result["notebook_kernel_cpu_cores_median"]
    print("notebook kernel CPU (cores): " + ", ".join(f"{m} {v:.3f}" for m, v in cpu.items()))
    wcpu = result["worker_cpu_ms_per_step_median"]
    print("workers' CPU per step (ms, both workers): " + ", ".join(f"{m} {v:.2f}" for m, v in wcpu.items()))
    print(f"frontend update rate: {result['frontend_update_rate_per_s']:.2f}/s"
          f" (most in any second: {result['frontend_max_updates_in_any_1s']}; limit ~5/s);"
          f" chart update size {result['chart_update_bytes_median']:.0f} B median,"
          f" {result['chart_update_bytes_max']} B max")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
