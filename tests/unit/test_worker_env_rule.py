"""One worker-environment rule: the cluster and export give every worker the same variables.

For a matrix of specs, the environment the cluster hands its launcher (recorded by a launcher that
starts nothing) must equal the environment an exported ``worker-<i>.sh`` gives its process (run
with bash under ``env -i``; the exported script dumps ``os.environ``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.engine.async_cluster import AsyncCluster
from mwnotebook.errors import ClusterStartError, ConfigError
from mwnotebook.export.scripts import export_cell

#: Stands in for the interpreter the launchers exec: writes the environment it was given, runs nothing.
DUMP_ENV = ("import json, os\n"
            "path = 'env-' + os.environ['MWNOTEBOOK_WORKER_INDEX'] + '.json'\n"
            "json.dump(dict(os.environ), open(path, 'w'))\n")
#: What bash and Python add to any process's environment by themselves.
SHELL_OWN = {"PWD", "SHLVL", "_", "OLDPWD", "LC_CTYPE"}

MATRIX: list[tuple[str, dict[str, Any], str | None]] = [
    ("defaults", dict(workers=2), None),
    ("one worker", dict(workers=1, legacy_keras=False), None),
    ("cpu", dict(workers=3, cpu=True), None),
    ("gpus from the notebook's CUDA_VISIBLE_DEVICES", dict(workers=2, gpus_per_worker=1), "3,1"),
    ("two gpus each", dict(workers=2, gpus_per_worker=2), "0,1,2,3"),
    ("hosts with gpus", dict(hosts=("a*2", "u@b:2222"), gpus_per_worker=1), None),
    ("hosts with --workers-per-host", dict(hosts=("a", "b"), workers_per_host=2, cpu=True), None),
    ("collective ring", dict(workers=2, collective="ring", cpu=True), None),
    ("collective nccl", dict(workers=2, collective="nccl"), None),
    ("mixed precision + xla on cpu", dict(workers=2, cpu=True, mixed_precision="bfloat16", xla=True,
                                          env={"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}), None),
    ("xla on gpus", dict(workers=2, xla=True, legacy_keras=True), None),
    ("--env", dict(workers=2, env={"DATA_DIR": "/data/my set", "QUOTE": "it's", "TF_CPP_MIN_LOG_LEVEL": "0",
                                   "TF_FORCE_GPU_ALLOW_GROWTH": "false"}), None),
]


class RecordingLauncher:
    """Records the environment of every worker the cluster asks for, then refuses to start it."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.envs: dict[int, dict[str, str]] = {}

    async def tf_addresses(self, count: int) -> list[str]:
        assert count == len(self.addresses)
        return list(self.addresses)

    async def start(self, index: int, env: Mapping[str, str]) -> Any:
        self.envs[index] = dict(env)
        raise ClusterStartError("recording only", worker=index)

    async def close(self) -> None:
        pass


def cluster_envs(spec: ClusterSpec, addresses: list[str]) -> list[dict[str, str]]:
    launcher = RecordingLauncher(addresses)
    with pytest.raises(ClusterStartError, match="recording only"):
        asyncio.run(AsyncCluster(spec, launcher=launcher).start())
    return [launcher.envs[i] for i in range(spec.workers)]


def exported_envs(spec: ClusterSpec, directory: Path) -> tuple[list[str], list[dict[str, str]]]:
    ports = [20000 + i for i in range(spec.workers)] if not spec.hosts else None
    dumper = directory / "dump-env"
    dumper.write_text(f"#!{sys.executable} -S\n{DUMP_ENV}")
    dumper.chmod(0o755)
    job = export_cell("pass\n", directory, spec, ports=ports, python=str(dumper))
    envs = []
    for i, launcher in enumerate(job.launchers):
        subprocess.run(["env", "-i", "bash", str(launcher)], check=True, timeout=60)
        seen = json.loads((directory / f"env-{i}.json").read_text())
        envs.append({k: v for k, v in seen.items() if k not in SHELL_OWN})
    return list(job.addresses), envs


@pytest.mark.parametrize("name, fields, notebook_gpus", MATRIX, ids=[m[0] for m in MATRIX])
def test_cluster_and_export_give_the_same_environment(name: str, fields: dict[str, Any], notebook_gpus: str | None,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if notebook_gpus is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        monkeypatch.setattr("mwnotebook.config.devices.count_machine_gpus", lambda *a, **k: 0)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", notebook_gpus)
    spec = ClusterSpec(**fields)
    addresses, exported = exported_envs(spec, tmp_path)
    from_cluster = cluster_envs(spec, addresses)
    assert exported == from_cluster
    assert [e["MWNOTEBOOK_WORKER_INDEX"] for e in exported] == [str(i) for i in range(spec.workers)]
    assert all(json.loads(e["TF_CONFIG"])["cluster"]["worker"] == addresses for e in exported)


def test_the_matrix_covers_every_kind_of_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards the matrix: each variable the rule can set shows up in some case."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    seen: set[str] = set()
    devices: set[str] = set()
    for _, fields, _gpus in MATRIX:
        spec = ClusterSpec(**fields)
        for env in cluster_envs(spec, [f"h:{i}" for i in range(spec.workers)]):
            seen |= set(env)
            devices.add(env.get("CUDA_VISIBLE_DEVICES", ""))
    assert {"CUDA_VISIBLE_DEVICES", "TF_USE_LEGACY_KERAS", "MWNOTEBOOK_COLLECTIVE", "TF_XLA_FLAGS",
            "TF_FORCE_GPU_ALLOW_GROWTH", "DATA_DIR", "TF_CONFIG", "MWNOTEBOOK_NUM_WORKERS"} <= seen
    assert {"-1", "0", "1", "0,1", "2,3"} <= devices


def test_gpu_conflicts_are_refused_once_by_the_spec() -> None:
    with pytest.raises(ConfigError, match="--cpu and --gpus-per-worker"):
        ClusterSpec(workers=2, cpu=True, gpus_per_worker=1)
    with pytest.raises(ConfigError, match="--cpu and --env CUDA_VISIBLE_DEVICES"):
        ClusterSpec(workers=2, cpu=True, env={"CUDA_VISIBLE_DEVICES": "0"})


def test_hosts_are_parsed_once_per_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The spec parses ``--hosts``; launcher, GPU split and export read its placement."""
    from mwnotebook.config import hosts
    from mwnotebook.launchers.ssh.launcher import SSHLauncher

    calls: list[str] = []
    real = hosts.parse_host

    def counting(entry: str) -> hosts.HostSpec:
        calls.append(entry)
        return real(entry)

    monkeypatch.setattr(hosts, "parse_host", counting)
    spec = ClusterSpec(hosts=("a*2", "u@b:2222"), gpus_per_worker=1)
    parsed = len(calls)
    SSHLauncher.from_spec(spec)
    export_cell("pass\n", tmp_path, spec)
    cluster_envs(spec, ["a:1", "a:2", "b:1"])
    assert parsed == 2 and len(calls) == parsed
