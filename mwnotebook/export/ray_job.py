"""Export a ``%%mwtrain`` cell as a Ray job: ``--format ray``.

Writes into one directory:

- ``train.py``: the cell as a script (as every format writes it).
- ``ray_job.py``: the job's entrypoint, for ``ray job submit --working-dir DIR -- python ray_job.py``
  (or run as a driver on a node of the cluster). It does what ``%%mwtrain --ray`` does, with Ray's
  own actors instead of mwnotebook's relays: one placement group of N bundles (``--cpus-per-worker``,
  ``--gpus-per-worker``, ``--ray-strategy``), one small actor per bundle that holds a free TF port on
  its node, then TF_CONFIG built from the bundles' node addresses and those ports, in bundle order,
  and each actor runs ``train.py`` with its TF_CONFIG and the variables the notebook's workers get
  (``config/worker_env.py``, the one rule; thread counts from the bundle's CPUs and
  ``CUDA_VISIBLE_DEVICES`` from the GPUs Ray gave the bundle, as ``launchers/ray/launcher.py`` sets
  them). Every worker's output is printed by the entrypoint, each line prefixed ``[worker i]``, so
  it is in the job's logs; the first worker that fails ends the others (they would wait forever in
  a collective) and the job.

Only plain clusters (``MultiWorkerMirroredStrategy`` workers): a cluster with ``--ps``,
``--chief`` or ``--evaluator`` is refused before anything is written.

Pure: builds text and writes files; starts nothing, imports neither Ray nor TensorFlow.
"""

from __future__ import annotations

import pprint
from dataclasses import dataclass
from pathlib import Path

from mwnotebook.config.ray_options import DEFAULT_CPUS_PER_WORKER
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import recipe_code, worker_envs
from mwnotebook.errors import ConfigError
from mwnotebook.export.roles import uses_roles
from mwnotebook.export.scripts import MARKER, SCRIPT_NAME, script_source

__all__ = ["ENTRYPOINT", "ExportedRayJob", "entrypoint_source", "export_ray_job", "job_config"]

ENTRYPOINT = "ray_job.py"
#: Set per worker by the entrypoint, not shared by all (launchers/ray/launcher.py THREAD_ENV too).
PER_WORKER = ("TF_CONFIG", "MWNOTEBOOK_WORKER_INDEX")
THREAD_ENV = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


@dataclass(frozen=True)
class ExportedRayJob:
    """What :func:`export_ray_job` wrote."""

    directory: Path
    files: tuple[Path, ...]
    disabled_lines: tuple[str, ...] = ()

    def __str__(self) -> str:
        return str(self.directory)

    def summary(self) -> str:
        names = ", ".join(p.name for p in self.files)
        text = (f"Exported a Ray job to {self.directory} ({names}):\n"
                f"  ray job submit --address http://HEAD_HOST:8265 --working-dir {self.directory} "
                f"-- python {ENTRYPOINT}")
        if self.disabled_lines:
            text += ("\nIPython-only lines were disabled in train.py (a plain script cannot run them):\n"
                     + "\n".join(f"  {line.strip()}" for line in self.disabled_lines))
        return text


def job_config(spec: ClusterSpec, python: str | None = None) -> dict[str, object]:
    """What the entrypoint needs: the bundles, the shared variables, the interpreter."""
    if uses_roles(spec):
        raise ConfigError("--format ray exports plain workers (MultiWorkerMirroredStrategy) only; "
                          "--ps, --chief and --evaluator clusters: export --format slurm or tfjob")
    cpus = spec.cpus_per_worker or DEFAULT_CPUS_PER_WORKER
    placeholders = [f"node:{i}" for i in range(spec.workers)]
    # GPUs: Ray gives each bundle its own; the entrypoint sets CUDA_VISIBLE_DEVICES from them.
    env = worker_envs(spec, placeholders, environ={}, gpu_count=spec.workers * (spec.gpus_per_worker or 0))[0]
    for name in PER_WORKER:
        env.pop(name, None)
    if spec.gpus_per_worker:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    for name in THREAD_ENV:
        env.setdefault(name, str(cpus))
    return {"workers": spec.workers, "cpus_per_worker": cpus, "gpus_per_worker": spec.gpus_per_worker or 0,
            "strategy": spec.ray_strategy, "env": env, "python": python or spec.python or "",
            "script": SCRIPT_NAME, "placement_timeout": max(spec.startup_timeout, 300.0)}


_ENTRYPOINT = '''"""The %%mwtrain cell (train.py) as a Ray job: one TensorFlow worker per placement-group bundle.

Submit from anywhere that reaches the head's dashboard (port 8265):

    ray job submit --address http://HEAD_HOST:8265 --working-dir . -- python ray_job.py

or run it as a driver on a node of the cluster (RAY_ADDRESS=HEAD_HOST:6379 python ray_job.py).
Each worker is a Ray actor in its bundle; it holds a free port on its node, and train.py runs with
TF_CONFIG listing every bundle's node address and port, in bundle order (task.index = bundle).
Output: every worker's lines, prefixed [worker i]. Exit status: 0 when every worker exited 0.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

JOB = json.loads(CONFIG)


def _die_with_parent():
    """The worker's process ends with its actor (Linux: PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


class TrainWorker:
    """One worker: a port held on this node until train.py starts, then train.py's process."""

    def __init__(self, index):
        self.index = index
        self.ip = ray.util.get_node_ip_address()
        self.holder = socket.create_server((self.ip, 0))
        self.lines = []
        self.code = None
        self.proc = None

    def address(self):
        port = self.holder.getsockname()[1]
        return f"[{self.ip}]:{port}" if ":" in self.ip else f"{self.ip}:{port}"

    def start(self, tf_config, source):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}  # set for the actor only
        env.update(JOB["env"])
        env["TF_CONFIG"] = tf_config
        env["MWNOTEBOOK_WORKER_INDEX"] = str(self.index)
        if JOB["gpus_per_worker"]:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(int(g)) for g in ray.get_gpu_ids())
        cwd = os.getcwd()
        if not os.path.exists(os.path.join(cwd, JOB["script"])):  # not submitted with --working-dir
            cwd = tempfile.mkdtemp(prefix="mwnotebook-ray-job-")
            with open(os.path.join(cwd, JOB["script"]), "w") as f:
                f.write(source)
        self.holder.close()  # the port is train.py's now
        self.proc = subprocess.Popen([JOB["python"] or sys.executable, "-u", JOB["script"]], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     errors="replace", preexec_fn=_die_with_parent)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\\n"))
        self.code = self.proc.wait()

    def poll(self, offset):
        """(new lines since offset, exit code or None while it runs)"""
        code = self.code
        return self.lines[offset:], code

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()


def main():
    ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False)
    count = JOB["workers"]
    bundle = {"CPU": float(JOB["cpus_per_worker"])}
    if JOB["gpus_per_worker"]:
        bundle["GPU"] = float(JOB["gpus_per_worker"])
    group = placement_group([dict(bundle)] * count, strategy=JOB["strategy"])
    ready, _ = ray.wait([group.ready()], timeout=JOB["placement_timeout"])
    if not ready:
        print(f"ray_job.py: Ray did not place {count} bundles of {bundle} ({JOB['strategy']}) within "
              f"{JOB['placement_timeout']:.0f} s; free resources: {ray.available_resources()}", flush=True)
        return 1
    actor = ray.remote(TrainWorker)
    workers = [actor.options(num_cpus=bundle["CPU"], num_gpus=bundle.get("GPU", 0), max_concurrency=2,
                             scheduling_strategy=PlacementGroupSchedulingStrategy(
                                 placement_group=group, placement_group_bundle_index=i)).remote(i)
               for i in range(count)]
    addresses = ray.get([w.address.remote() for w in workers])
    print("ray_job.py: TF_CONFIG cluster", json.dumps({"worker": addresses}), flush=True)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), JOB["script"])) as f:
        source = f.read()
    ray.get([w.start.remote(json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": i}}),
                            source) for i, w in enumerate(workers)])
    offsets, codes, failed = [0] * count, [None] * count, None
    while any(c is None for c in codes):
        for i, (lines, code) in enumerate(ray.get([w.poll.remote(o) for w, o in zip(workers, offsets)])):
            for line in lines:
                print(f"[worker {i}] {line}", flush=True)
            offsets[i] += len(lines)
            if code is not None and codes[i] is None:
                codes[i] = code
                if code != 0 and failed is None:
                    failed = i
                    print(f"ray_job.py: worker {i} failed (exit {code}); stopping the others", flush=True)
                    ray.get([w.stop.remote() for w in workers])
        time.sleep(0.2)
    for i, code in enumerate(codes):
        print(f"ray_job.py: worker {i} exit {code}", flush=True)
    remove_placement_group(group)
    return 0 if failed is None else 1


if __name__ == "__main__":
    sys.exit(main())
'''


def entrypoint_source(config: dict[str, object]) -> str:
    """``ray_job.py`` for ``config`` (:func:`job_config`)."""
    head = (f"# {MARKER}: a %%mwtrain cell as a Ray job ({config['workers']} TensorFlow workers, one Ray "
            "actor each).\n")
    body = _ENTRYPOINT.replace("JOB = json.loads(CONFIG)", "JOB = " + pprint.pformat(config, sort_dicts=False))
    return head + body


def export_ray_job(code: str, out_dir: str | Path, spec: ClusterSpec, *, python: str | None = None) -> ExportedRayJob:
    """Write ``code`` as a Ray job for ``spec`` into ``out_dir`` (``train.py`` and ``ray_job.py``)."""
    directory = Path(out_dir)
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory} exists and is not a directory")
    config = job_config(spec, python)  # its ConfigError before any file
    script_text, disabled = script_source(code, recipe_code(spec))
    script_text = script_text.replace("(see worker-<i>.sh)", f"(set by {ENTRYPOINT})")
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / SCRIPT_NAME
    script.write_text(script_text)
    entry = directory / ENTRYPOINT
    entry.write_text(entrypoint_source(config))
    return ExportedRayJob(directory=directory, files=(script, entry), disabled_lines=tuple(disabled))
