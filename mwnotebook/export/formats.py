"""Export a ``%%mwtrain`` cell as a batch job for a scheduler: ``--format slurm`` or ``tfjob``.

``slurm`` writes into one directory:

- ``train.py``: the cell as a script (as the default format writes it).
- ``slurm_tf_config.py``: a small stdlib launcher that builds TF_CONFIG from Slurm's variables
  (node list expanded with ``scontrol show hostnames``, ``SLURM_PROCID``, tasks per node) and execs
  the script. Not TensorFlow's ``SlurmClusterResolver`` (fails on CPU-only nodes, port 8888).
- ``job.sbatch``: ``#SBATCH`` lines (one task per worker, ``--slurm`` arguments carried over) and one
  ``srun`` that starts every worker; ``--kill-on-bad-exit`` ends the job when one worker fails,
  instead of leaving the others blocked in a collective. With ``--ps``/``--chief``/``--evaluator``
  every TensorFlow task is one Slurm task of that step (export/slurm_roles.py), a ``--ps`` job's
  servers run ``serve.py`` (also written) and stop when the chief ends.

``tfjob`` writes ``train.py`` and ``tfjob.yaml``: a ConfigMap holding the script and a Kubeflow
``TFJob`` (kubeflow.org/v1) with one ``Worker`` replica spec; the training operator sets each
pod's TF_CONFIG itself.

Pure: builds text and writes files; starts nothing, imports no TensorFlow.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from mwnotebook.config.slurm_options import place_node_args, split_salloc_args
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import recipe_code, worker_envs
from mwnotebook.errors import ConfigError
from mwnotebook.export.roles import SERVE_NAME, SERVE_SOURCE, tfjob_replica_specs, uses_roles
from mwnotebook.export.scripts import MARKER, SCRIPT_NAME, script_source
from mwnotebook.export.slurm_roles import describe, placed_nodes, roles_step, shared_env, slurm_tasks
from mwnotebook.processes import shipped
from mwnotebook.processes.shipped.slurm_tf_config import DEFAULT_PORT

FORMATS = ("slurm", "tfjob")
BATCH_SCRIPT = "job.sbatch"
TF_CONFIG_LAUNCHER = "slurm_tf_config.py"
TFJOB_MANIFEST = "tfjob.yaml"
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class ExportedBatchJob:
    """What :func:`export_format` wrote."""

    directory: Path
    format: str
    files: tuple[Path, ...]
    disabled_lines: tuple[str, ...] = ()
    #: ``(task name, node)`` of the tasks ``--place`` puts on named nodes (a Slurm job); the rest: Slurm's.
    placed: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return str(self.directory)

    def summary(self) -> str:
        names = ", ".join(p.name for p in self.files)
        how = (f"sbatch {self.directory / BATCH_SCRIPT}" if self.format == "slurm"
               else f"kubectl apply -f {self.directory / TFJOB_MANIFEST}")
        text = f"Exported a {self.format} job to {self.directory} ({names}):\n  {how}"
        if self.placed:
            text += ("\n  placed by --place: " + ", ".join(f"{t} on {n}" for t, n in self.placed)
                     + " (#SBATCH --nodelist); the other tasks where Slurm puts them")
        if self.disabled_lines:
            text += ("\nIPython-only lines were disabled in train.py (a plain script cannot run them):\n"
                     + "\n".join(f"  {line.strip()}" for line in self.disabled_lines))
        return text


# --------------------------------------------------------------------------- slurm

def sbatch_lines(salloc_args: Sequence[str]) -> list[str]:
    """``--slurm`` arguments as ``#SBATCH`` lines: one option (with its value) per line."""
    lines: list[list[str]] = []
    for arg in salloc_args:
        if arg.startswith("-") or not lines:
            lines.append([arg])
        else:
            lines[-1].append(arg)
    return ["#SBATCH " + " ".join(shlex.quote(a) for a in line) for line in lines]


def _worker_env(spec: ClusterSpec) -> dict[str, str]:
    """What every Slurm task gets; with roles, what every task has alike (export/slurm_roles.py).
    Otherwise: what every Slurm task gets: the one worker-environment rule (config/worker_env.py), less what
    differs per task and is built at run time from Slurm's variables (TF_CONFIG, the worker index)."""
    if uses_roles(spec):
        return shared_env(spec, gpu_count=spec.workers * (spec.gpus_per_worker or 0))
    placeholders = [f"node:{port}" for port in range(len(spec.layout.training_tasks()))]
    # GPUs are bound per task by srun --gpus-per-task, not split on this machine: never ask its driver.
    env = worker_envs(spec, placeholders, environ={}, gpu_count=spec.workers * (spec.gpus_per_worker or 0))[0]
    for per_task in ("TF_CONFIG", "MWNOTEBOOK_WORKER_INDEX"):
        env.pop(per_task, None)
    if spec.gpus_per_worker:  # Slurm's --gpus-per-task sets each task's CUDA_VISIBLE_DEVICES itself
        env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def batch_script_source(spec: ClusterSpec, env: Mapping[str, str], python: str, port: int = DEFAULT_PORT) -> str:
    roles = uses_roles(spec)
    what = describe(spec) if roles else f"{spec.workers} TensorFlow workers"
    header = ["#!/bin/bash", f"# {MARKER}: a %%mwtrain cell as a Slurm batch job ({what}, one Slurm task each).",
              "#SBATCH --job-name=mwnotebook-train", f"#SBATCH --ntasks={len(slurm_tasks(spec))}",
              "#SBATCH --output=slurm-%j.out"]
    if spec.workers_per_host:
        header.append(f"#SBATCH --ntasks-per-node={spec.workers_per_host}")
    if spec.gpus_per_worker:
        header.append(f"#SBATCH --gpus-per-task={spec.gpus_per_worker}")
    args = split_salloc_args(spec.slurm or "")
    # The nodes --place names are in the job (slurm_tf_config.py puts the tasks there): one node list,
    # the user's when --slurm has one (config/slurm_options.py place_node_args, as the live launcher).
    placed = placed_nodes(spec) if roles else {}
    header += sbatch_lines(args + place_node_args(args, spec.place, list(placed.values())))
    body = ["", "# Submit from this directory: sbatch job.sbatch (output in slurm-<jobid>.out).",
            'cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")}" || exit 1']
    body += [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    body.append(f"export MWNOTEBOOK_TF_PORT=${{MWNOTEBOOK_TF_PORT:-{port}}}  # task i on a node: this + i")
    if roles:
        return "\n".join(header + body + roles_step(spec, python, TF_CONFIG_LAUNCHER, SCRIPT_NAME, SERVE_NAME))
    body += ["# One task per worker; each builds its TF_CONFIG from Slurm's variables, then runs train.py.",
             "# --kill-on-bad-exit: one failed worker ends the job instead of leaving the others blocked.",
             f"srun --kill-on-bad-exit=1 {shlex.quote(python)} {TF_CONFIG_LAUNCHER} "
             f"{shlex.quote(python)} {SCRIPT_NAME}", ""]
    return "\n".join(header + body)


# --------------------------------------------------------------------------- tfjob

def _k8s_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:50] or "mwnotebook-train"
    if not _K8S_NAME.match(name):
        raise ConfigError(f"--name {text!r} cannot be a Kubernetes name (lowercase letters, digits, '-')")
    return name


def _tf_version(default: str) -> str:
    """This machine's TensorFlow version as ``major.minor.patch`` (without importing it)."""
    for dist in ("tensorflow", "tensorflow-cpu"):
        try:
            return metadata.version(dist).split("+")[0]
        except metadata.PackageNotFoundError:
            continue
    return default


def default_image() -> str:
    """The official image of the TensorFlow version the notebook runs (edit for GPUs: ``-gpu``)."""
    return f"tensorflow/tensorflow:{_tf_version(default='latest')}"


def tfjob_documents(spec: ClusterSpec, script_text: str, env: Mapping[str, str], name: str = "mwnotebook-train",
                    image: str | None = None) -> list[dict[str, Any]]:
    """A ConfigMap with ``train.py`` and a TFJob running it on ``spec.workers`` Worker pods."""
    name = _k8s_name(name)
    command = ["python", f"/workspace/{SCRIPT_NAME}"]
    if env.get("TF_USE_LEGACY_KERAS") == "1":
        # TensorFlow's images have Keras 3 only; TF_USE_LEGACY_KERAS=1 needs tf_keras beside it.
        command = ["sh", "-c", "python -c 'import tf_keras' 2>/dev/null || python -m pip install --quiet "
                   f"'tf-keras~={_tf_version(default='2.16')}'; exec python /workspace/{SCRIPT_NAME}"]
    container: dict[str, Any] = {
        "name": "tensorflow",  # the container name the training operator looks for
        "image": image or default_image(),
        "command": command,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "volumeMounts": [{"name": "script", "mountPath": "/workspace", "readOnly": True}],
    }
    if spec.gpus_per_worker:
        container["resources"] = {"limits": {"nvidia.com/gpu": spec.gpus_per_worker}}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": f"{name}-script"}, "data": {SCRIPT_NAME: script_text}}
    tfjob = {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": name, "annotations": {"mwnotebook/generated": MARKER}},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 3},
            "tfReplicaSpecs": {"Worker": {
                "replicas": spec.workers, "restartPolicy": "OnFailure",
                "template": {"spec": {
                    "containers": [container],
                    "volumes": [{"name": "script", "configMap": {"name": f"{name}-script"}}],
                }},
            }},
        },
    }
    if uses_roles(spec):  # Chief / Worker / PS / Evaluator replicas (export/roles.py)
        volumes = [{"name": "script", "configMap": {"name": f"{name}-script"}}]
        serve = [part.replace(SCRIPT_NAME, SERVE_NAME) for part in command]
        tfjob["spec"]["tfReplicaSpecs"] = tfjob_replica_specs(spec, container, volumes, serve)  # type: ignore[index]
        if spec.ps:
            config_map["data"][SERVE_NAME] = SERVE_SOURCE  # type: ignore[index]
    return [config_map, tfjob]


def dump_yaml(documents: Sequence[Mapping[str, Any]]) -> str:
    """Multi-document YAML (PyYAML when present; JSON, which is valid YAML, otherwise)."""
    try:
        import yaml
    except ImportError:
        return "---\n".join(json.dumps(doc, indent=2) + "\n" for doc in documents)

    class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # yaml ships no types here
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None  # the script stays readable in the manifest
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, text)
    dumped: str = yaml.dump_all(list(documents), Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    return dumped


# --------------------------------------------------------------------------- writing

def export_format(code: str, out_dir: str | Path, spec: ClusterSpec, fmt: str, *, python: str | None = None,
                  image: str | None = None) -> ExportedBatchJob:
    """Write ``code`` as a ``fmt`` job (``slurm`` or ``tfjob``) for ``spec`` into ``out_dir``."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of shell, {', '.join(FORMATS)}; got {fmt!r}")
    directory = Path(out_dir)
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory} exists and is not a directory")
    script_text, disabled = script_source(code, recipe_code(spec))
    where = "(set by slurm_tf_config.py in job.sbatch)" if fmt == "slurm" else "(set by the TFJob operator)"
    script_text = script_text.replace("(see worker-<i>.sh)", where)
    env = _worker_env(spec)
    python = python or spec.python or "python3"
    # The batch script first: its ConfigErrors (config/slurm_options.py place_node_args) come before any file.
    batch_text = batch_script_source(spec, env, python) if fmt == "slurm" else ""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / SCRIPT_NAME
    script.write_text(script_text)
    if fmt == "slurm":
        launcher = directory / TF_CONFIG_LAUNCHER
        source = shipped.path("slurm_tf_config.py")
        launcher.write_text(f"# {MARKER} (a copy of mwnotebook/processes/shipped/slurm_tf_config.py)\n"
                            + source.read_text(encoding="utf-8"))
        batch = directory / BATCH_SCRIPT
        batch.write_text(batch_text)
        batch.chmod(0o755)
        files: tuple[Path, ...] = (script, launcher, batch)
        if spec.layout.parameter_server:
            serve = directory / SERVE_NAME
            serve.write_text(SERVE_SOURCE)
            files += (serve,)
    else:
        manifest = directory / TFJOB_MANIFEST
        manifest.write_text(dump_yaml(tfjob_documents(spec, script_text, env, image=image)))
        files = (script, manifest)
    placed = tuple((t.name, n) for t, n in placed_nodes(spec).items()) if fmt == "slurm" and uses_roles(spec) else ()
    return ExportedBatchJob(directory=directory, format=fmt, files=files, disabled_lines=tuple(disabled),
                            placed=placed)
