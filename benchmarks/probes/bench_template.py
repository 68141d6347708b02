"""Worker templates, measured side by side in one run against today's start and the hand launch.

    python -m benchmarks.probes.bench_template [--repeats 3] [--steps 300]

1. first seed cell 3 s after ``%load_ext mwnotebook`` (cold workers), in a real notebook kernel, vs
   the hand launch of the seed's two scripts; template on and off (``MWNOTEBOOK_TEMPLATE=0``);
2. a failed ``%%mwtrain`` cell (tests/data/fail_on_worker1.py) -> the next cell's first instruction
   runs on the workers: seconds after the error reached the notebook's client;
3. start to ready of 8 workers (``Cluster.start``; template warm) with and without the template;
4. memory of 8 workers with TensorFlow imported: sum of PSS, forked (+ the template) vs started apart;
5. steady-state training step time inside ``%%mwtrain`` worker kernels (forked) vs the hand-launched
   scripts, ``--steps`` timed steps after 30 warm-up steps.

Writes benchmarks/results/template/<commit>.json and prints a markdown table. Rounds alternate between the
variants so that the machine's load hits all of them alike.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import psutil
from jupyter_client.manager import start_new_kernel

from benchmarks._suite import ROOT, SEED_CODE, SEED_LINE, hand_launch_seed, median, write_result
from mwnotebook import Cluster
from mwnotebook.engine.loop import background_loop
from mwnotebook.launchers.local.prestart import prestart_template

FAIL_CODE = (ROOT / "tests" / "data" / "fail_on_worker1.py").read_text()
FIRST_INSTRUCTION = "import time\nprint('FIRST', time.time(), flush=True)\n"

STEP_CODE = '''
import json, os, time
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
def dataset_fn(ctx):
    x = tf.random.stateless_normal((4096, 32), seed=(1, 2))
    y = tf.cast(tf.reduce_sum(x, axis=1, keepdims=True) > 0, tf.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64).prefetch(2)
ds = strategy.distribute_datasets_from_function(dataset_fn)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(32,)), tf.keras.layers.Dense(256, activation="relu"),
                                 tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)
@tf.function
def train_step(iterator):
    def step(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.binary_crossentropy(y, model(x), from_logits=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, strategy.run(step, args=(next(iterator),)), axis=None)
iterator = iter(ds)
for _ in range(30):
    train_step(iterator)
float(train_step(iterator))
start = time.perf_counter()
for _ in range({steps}):
    loss = train_step(iterator)
float(loss)
print(f"STEP_MS {{1000 * (time.perf_counter() - start) / {steps}:.3f}}", flush=True)
'''


# ----------------------------------------------------------------------------- a notebook kernel
class Notebook:
    """A real notebook kernel (jupyter_client) with the extension loaded."""

    def __init__(self, template: bool) -> None:
        env = dict(os.environ, MWNOTEBOOK_TEMPLATE="1" if template else "0")
        self.km, self.client = start_new_kernel(kernel_name="python3", env=env, cwd=str(ROOT))

    def run(self, code: str, timeout: float = 600) -> dict:
        """Execute a cell; its stdout, wall time, and when its first error reached us (time.time())."""
        msg_id = self.client.execute(code)
        started = time.perf_counter()
        stdout, error_at = [], None
        while True:
            msg = self.client.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                stdout.append(content["text"])
            elif kind == "error" and error_at is None:
                error_at = time.time()
            elif kind == "status" and content["execution_state"] == "idle":
                break
        self.client.get_shell_msg(timeout=timeout)
        return {"stdout": "".join(stdout), "wall": time.perf_counter() - started, "error_at": error_at}

    def close(self) -> None:
        try:
            self.run("%mwcluster stop", timeout=60)
        finally:
            self.client.stop_channels()
            self.km.shutdown_kernel(now=False)


def first_cell_and_recovery(template: bool, recoveries: int) -> tuple[float, list[float]]:
    """Seed cell 3 s after %load_ext (cold workers); then failed cell -> next cell's first instruction."""
    nb = Notebook(template)
    try:
        nb.run("%load_ext mwnotebook")
        time.sleep(3)
        cell = nb.run("%%mwtrain --workers 2 --cpu\n" + SEED_CODE)
        for i in range(2):
            if f"[worker {i}] {SEED_LINE.format(i=i)}" not in cell["stdout"]:
                raise RuntimeError(f"seed lines missing:\n{cell['stdout'][-3000:]}")
        delays = []
        for _ in range(recoveries):
            failed = nb.run("%%mwtrain --workers 2 --cpu\n" + FAIL_CODE)
            if failed["error_at"] is None:
                raise RuntimeError(f"the failing cell did not fail:\n{failed['stdout'][-2000:]}")
            nxt = nb.run("%%mwtrain --workers 2 --cpu\n" + FIRST_INSTRUCTION)
            firsts = [float(t) for t in re.findall(r"FIRST ([\d.]+)", nxt["stdout"])]
            if len(firsts) != 2:
                raise RuntimeError(f"next cell did not run on both workers:\n{nxt['stdout'][-2000:]}")
            delays.append(max(firsts) - failed["error_at"])
        return cell["wall"], delays
    finally:
        nb.close()


# ----------------------------------------------------------------------------- 8 workers
def pss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("Pss:"))


def eight_workers(template: bool) -> tuple[float, float, float]:
    """(seconds to ready, sum of workers' PSS in MiB, the same + the template's PSS)."""
    if template:
        background_loop().run(prestart_template())  # what %load_ext did a while ago
    started = time.perf_counter()
    cluster = Cluster(workers=8, template=template).start()
    ready = time.perf_counter() - started
    try:
        cluster.run("import tensorflow as tf")
        time.sleep(1)
        pids = [info.pid for info in cluster.status()]
        workers = sum(pss_kib(pid) for pid in pids) / 1024
        tpl = cluster.launcher.template
        with_template = workers + (pss_kib(tpl.pid) / 1024 if tpl is not None else 0)
    finally:
        cluster.stop()
    return ready, workers, with_template


# ----------------------------------------------------------------------------- step time
def hand_step_ms(steps: int) -> float:
    from mwnotebook.config.tf_config import PortReservation

    reservation = PortReservation.reserve(2)
    ports = reservation.ports
    reservation.release()
    workers = ",".join(f'"127.0.0.1:{p}"' for p in ports)
    with tempfile.TemporaryDirectory() as tmp:
        script = pathlib.Path(tmp) / "train.py"
        script.write_text(STEP_CODE.format(steps=steps))
        procs = []
        for i in range(2):
            tf_config = f'{{"cluster":{{"worker":[{workers}]}},"task":{{"type":"worker","index":{i}}}}}'
            env = dict(os.environ, TF_CONFIG=tf_config, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2",
                       TF_USE_LEGACY_KERAS="1")
            procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True))
        outs = [p.communicate(timeout=600)[0] for p in procs]
    values = [float(m) for out in outs for m in re.findall(r"STEP_MS ([\d.]+)", out)]
    if len(values) != 2:
        raise RuntimeError(f"hand launch did not report step times: {outs}")
    return max(values)


def _retry(measure, attempts: int = 3):
    for attempt in range(attempts):
        try:
            return measure()
        except (RuntimeError, subprocess.TimeoutExpired):
            if attempt == attempts - 1:
                raise


def kernel_step_ms(nb: Notebook, steps: int) -> float:
    cell = nb.run("%%mwtrain --workers 2 --cpu\n" + STEP_CODE.format(steps=steps))
    values = [float(m) for m in re.findall(r"STEP_MS ([\d.]+)", cell["stdout"])]
    if len(values) != 2:
        raise RuntimeError(f"workers did not report step times:\n{cell['stdout'][-2000:]}")
    return max(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731

    seed: dict[str, list[float]] = {"hand": [], "template": [], "no_template": []}
    recovery: dict[str, list[float]] = {"template": [], "no_template": []}
    hand_failures = 0
    for _ in range(args.repeats):
        for _attempt in range(3):  # on a heavily loaded machine the seed's own scripts sometimes fail
            elapsed, lines, _ = hand_launch_seed()  # (worker 1: "failed to connect" to worker 0)
            if lines == [SEED_LINE.format(i=i) for i in range(2)]:
                break
            hand_failures += 1
            log(f"hand launch failed: {lines}")
        else:
            raise RuntimeError("the hand launch of the seed failed 3 times in a row")
        seed["hand"].append(elapsed)
        for mode in ("template", "no_template"):
            wall, delays = first_cell_and_recovery(mode == "template", recoveries=2)
            seed[mode].append(wall)
            recovery[mode] += delays
        log(f"seed: hand {seed['hand'][-1]:.2f}  template {seed['template'][-1]:.2f}  "
            f"no-template {seed['no_template'][-1]:.2f};  recovery {recovery}")

    eight: dict[str, list[tuple[float, float, float]]] = {"template": [], "no_template": []}
    for _ in range(args.repeats):
        for mode in ("template", "no_template"):
            eight[mode].append(eight_workers(mode == "template"))
        log(f"8 workers: {eight}")

    steps: dict[str, list[float]] = {"hand": [], "kernel": []}
    nb = Notebook(template=True)
    try:
        nb.run("%load_ext mwnotebook")
        for _ in range(args.repeats):
            steps["hand"].append(_retry(lambda: hand_step_ms(args.steps)))
            steps["kernel"].append(kernel_step_ms(nb, args.steps))
            log(f"step ms: {steps}")
    finally:
        nb.close()

    hand = median(seed["hand"])
    ready = {m: median([r[0] for r in eight[m]]) for m in eight}
    pss = {m: median([r[1] for r in eight[m]]) for m in eight}
    pss_all = {m: median([r[2] for r in eight[m]]) for m in eight}
    step_ratio = median([k / h for k, h in zip(steps["kernel"], steps["hand"])])
    rows = [
        ("seed: hand launch of the two scripts", f"{hand:.2f} s", "1.00x", ""),
        ("seed: first `%%mwtrain` cell 3 s after `%load_ext` (template)", f"{median(seed['template']):.2f} s",
         f"{median(seed['template']) / hand:.2f}x", "<= 0.35x"),
        ("seed: the same without template (`MWNOTEBOOK_TEMPLATE=0`)", f"{median(seed['no_template']):.2f} s",
         f"{median(seed['no_template']) / hand:.2f}x", ""),
        ("failed cell -> next cell's first instruction (template)", f"{median(recovery['template']):.2f} s",
         "", "<= 1.0 s"),
        ("failed cell -> next cell's first instruction (no template)", f"{median(recovery['no_template']):.2f} s",
         "", ""),
        ("start to ready, 8 workers (template warm)", f"{ready['template']:.2f} s",
         f"{ready['template'] / ready['no_template']:.2f}x", "<= 1.5 s"),
        ("start to ready, 8 workers (no template)", f"{ready['no_template']:.2f} s", "1.00x", ""),
        ("memory, 8 workers with TF imported: sum of PSS, forked + template vs apart",
         f"{pss_all['template']:.0f} / {pss_all['no_template']:.0f} MiB",
         f"{pss_all['template'] / pss_all['no_template']:.2f}x", "<= 0.6x"),
        ("memory, the same without the template's own PSS", f"{pss['template']:.0f} MiB",
         f"{pss['template'] / pss['no_template']:.2f}x", ""),
        (f"steady-state step time, forked worker kernels vs hand launch ({args.steps} steps)",
         f"{median(steps['kernel']):.2f} / {median(steps['hand']):.2f} ms", f"{step_ratio:.3f}x", "<= 1.02x"),
    ]
    table = "| measurement | value | ratio | target |\n|---|---|---|---|\n" + "\n".join(
        f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows)
    path = write_result("template", {"hand_launch_failures": hand_failures, "seed_seconds": seed, "recovery_seconds": recovery,
                                     "eight_workers": eight, "step_ms": steps, "table": table,
                                     "load_average": psutil.getloadavg()})
    print(table)
    print(f"\nload average at the end: {psutil.getloadavg()}\nwritten to {path}")


if __name__ == "__main__":
    main()
