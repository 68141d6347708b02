"""export.py: the files a %%mwtrain cell becomes (no TensorFlow; run-local.sh driven with tiny fake workers)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.errors import ConfigError
from mwnotebook.export.scripts import MARKER, export_cell, script_source, tf_hosts, worker_script_source

SEED_WORKER_0 = ("TF_CONFIG='{\"cluster\":{\"worker\":[\"127.0.0.1:12345\",\"127.0.0.1:23456\"]},"
                 "\"task\":{\"type\":\"worker\",\"index\":0}}' exec python3 multiworker_train.py")

PLAIN = ClusterSpec(workers=2, legacy_keras=False)


def command_line(path: Path) -> str:
    """The one line of a launcher that starts the worker."""
    lines = [ln for ln in path.read_text().splitlines() if " exec " in ln]
    assert len(lines) == 1, path.read_text()
    return lines[0]


def assignments(line: str) -> dict[str, str]:
    """``K=V`` words before ``exec``, as the shell would see them."""
    words = shlex.split(line)
    env = {}
    for word in words[: words.index("exec")]:
        key, _, value = word.partition("=")
        env[key] = value
    return env


def test_launcher_is_the_seeds_line_for_the_seeds_cluster() -> None:
    text = worker_script_source(["127.0.0.1:12345", "127.0.0.1:23456"], 0, {}, script="multiworker_train.py")
    assert SEED_WORKER_0 in text.splitlines()


def test_export_writes_script_launchers_runner_and_readme(tmp_path: Path) -> None:
    code = "print('hello')\n"
    job = export_cell(code, tmp_path / "job", ClusterSpec(workers=3, legacy_keras=False),
                     ports=[12345, 23456, 34567])
    names = sorted(p.name for p in (tmp_path / "job").iterdir())
    assert names == ["README.md", "run-local.sh", "train.py", "worker-0.sh", "worker-1.sh", "worker-2.sh"]
    assert job.script.read_text().endswith(code)
    for path in [*job.launchers, job.run_local]:
        assert os.access(path, os.X_OK), path
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    configs = [json.loads(assignments(command_line(p))["TF_CONFIG"]) for p in job.launchers]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    expected = ["127.0.0.1:12345", "127.0.0.1:23456", "127.0.0.1:34567"]
    assert all(c["cluster"] == {"worker": expected} for c in configs)
    # Only the worker's index differs between the launchers.
    lines = [command_line(p) for p in job.launchers]
    assert lines[1] == lines[0].replace('"index":0', '"index":1').replace("WORKER_INDEX=0", "WORKER_INDEX=1")
    assert job.addresses == tuple(expected)


def test_default_ports_are_free_distinct_loopback_ports(tmp_path: Path) -> None:
    job = export_cell("pass\n", tmp_path, PLAIN)
    hosts_ports = [a.rsplit(":", 1) for a in job.addresses]
    assert [h for h, _ in hosts_ports] == ["127.0.0.1", "127.0.0.1"]
    assert len({p for _, p in hosts_ports}) == 2


def test_cluster_options_become_environment_variables(tmp_path: Path) -> None:
    spec = ClusterSpec(workers=2, cpu=True, legacy_keras=True, env={"DATA_DIR": "/data/my set", "A": "it's"},
                       xla=True, collective="ring")
    job = export_cell("pass\n", tmp_path, spec, ports=[1111, 2222])
    env = assignments(command_line(job.launchers[1]))
    assert env["CUDA_VISIBLE_DEVICES"] == "-1"
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert env["DATA_DIR"] == "/data/my set"
    assert env["A"] == "it's"
    assert env["MWNOTEBOOK_COLLECTIVE"] == "ring"
    assert "--tf_xla_cpu_global_jit" in env["TF_XLA_FLAGS"]
    assert list(env)[-1] == "TF_CONFIG"
    # What the shell really passes to the program:
    out = subprocess.run(["bash", "-c", command_line(job.launchers[1]).replace(
        "exec python3 train.py", "exec env")], capture_output=True, text=True, check=True).stdout
    assert "DATA_DIR=/data/my set" in out.splitlines()
    assert "A=it's" in out.splitlines()
    assert "set_jit(True)" in job.script.read_text()


def test_without_options_only_what_every_worker_gets_is_set(tmp_path: Path) -> None:
    base = ["TF_CPP_MIN_LOG_LEVEL", "MWNOTEBOOK_WORKER_INDEX", "MWNOTEBOOK_NUM_WORKERS", "TF_CONFIG"]
    job = export_cell("pass\n", tmp_path, ClusterSpec(workers=1, legacy_keras=False), ports=[1111])
    assert list(assignments(command_line(job.launchers[0]))) == base
    job = export_cell("pass\n", tmp_path, ClusterSpec(workers=2, cpu=True, legacy_keras=False), ports=[1, 2])
    assert list(assignments(command_line(job.launchers[1]))) == [base[0], "CUDA_VISIBLE_DEVICES", *base[1:]]


def test_hosts_drop_ssh_user_and_port_and_split_gpus_per_host(tmp_path: Path) -> None:
    spec = ClusterSpec(workers=3, hosts=("alice@gpu-a:2222*2", "gpu-b"), gpus_per_worker=2, legacy_keras=False)
    job = export_cell("pass\n", tmp_path, spec)
    assert job.addresses == ("gpu-a:12345", "gpu-a:12346", "gpu-b:12345")
    devices = [assignments(command_line(p))["CUDA_VISIBLE_DEVICES"] for p in job.launchers]
    assert devices == ["0,1", "2,3", "0,1"]
    readme = job.readme.read_text()
    assert "gpu-a:12346" in readme


@pytest.mark.parametrize("hosts, workers, tf_address, expected", [
    ((), 2, None, ["127.0.0.1", "127.0.0.1"]),
    (("u@[fe80::1]:22", "10.0.0.2:2200"), 2, None, ["fe80::1", "10.0.0.2"]),
    (("a*2", "b"), 3, None, ["a", "a", "b"]),
    (("alice@a:2222", "b"), 2, "a=10.1.0.1,b=10.1.0.2", ["10.1.0.1", "10.1.0.2"]),
])
def test_tf_hosts(hosts: tuple[str, ...], workers: int, tf_address: str | None, expected: list[str]) -> None:
    spec = ClusterSpec(workers=workers, hosts=hosts, tf_address=tf_address)
    assert tf_hosts(spec) == expected


def test_ipv6_hosts_are_bracketed_in_the_cluster_list(tmp_path: Path) -> None:
    job = export_cell("pass\n", tmp_path, ClusterSpec(workers=2, hosts=("[fe80::1]*2",), legacy_keras=False))
    assert job.addresses == ("[fe80::1]:12345", "[fe80::1]:12346")


@pytest.mark.parametrize("kwargs, message", [
    ({"ports": [1, 2, 3]}, "3 ports given for 2 workers"),
    ({"ports": [5000, 5000]}, "same host:port"),
    ({"ports": [0, 5000]}, "not a TCP port"),
])
def test_bad_ports_are_config_errors(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        export_cell("pass\n", tmp_path, PLAIN, **kwargs)


def test_host_counts_must_match_workers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="2 workers requested but --hosts"):
        export_cell("pass\n", tmp_path, ClusterSpec(workers=2, hosts=("a*2", "b")))


def test_ipython_lines_are_disabled_and_reported() -> None:
    code = "%time x = 1\nfor i in range(2):\n    !echo hi\nfiles = !ls\nprint(x)\n"
    text, disabled = script_source(code)
    assert disabled == ["%time x = 1", "    !echo hi", "files = !ls"]
    assert "    pass  # disabled (IPython only): !echo hi" in text
    compile(text, "train.py", "exec")


def test_plain_python_is_left_alone_even_with_leading_percent() -> None:
    code = 'msg = (\n    "%d items"\n    % 3\n)\nprint(msg)\n'
    text, disabled = script_source(code)
    assert disabled == []
    assert text.endswith(code)


def test_invalid_python_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="line 1"):
        script_source("def broken(:\n")


def test_reexport_with_fewer_workers_removes_only_its_own_stale_files(tmp_path: Path) -> None:
    export_cell("pass\n", tmp_path, ClusterSpec(workers=3, legacy_keras=False))
    (tmp_path / "worker-2.log").write_text("old log")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "worker-7.sh").write_text("# the user's own script\n")
    export_cell("pass\n", tmp_path, PLAIN)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "worker-2.sh" not in names and "worker-2.log" not in names
    assert "notes.txt" in names and "worker-7.sh" in names


def test_export_into_a_file_is_a_config_error(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        export_cell("pass\n", target, PLAIN)


def test_readme_covers_real_hosts(tmp_path: Path) -> None:
    job = export_cell("pass\n", tmp_path, ClusterSpec(workers=2, cpu=True, legacy_keras=False))
    text = job.readme.read_text()
    assert MARKER in text
    for phrase in ["Routable addresses", "Open ports", "Same environment everywhere",
                   "no authentication", "isolated", "bash run-local.sh", "CUDA_VISIBLE_DEVICES=-1"]:
        assert phrase in text, phrase


# ---- run-local.sh, driven with tiny Python workers (no TensorFlow) --------------------------

FAKE_WORKER = """
import json, os, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print(f"worker {index} pid {os.getpid()}", flush=True)
mode = os.environ.get("FAKE_MODE", "ok")
if mode == "fail1" and index == 1:
    time.sleep(0.5)
    sys.exit(3)
if mode in ("fail1", "hang"):
    time.sleep(120)  # like a worker blocked in a collective whose peer is gone
print(f"worker {index} done", flush=True)
"""


def export_fake(tmp_path: Path, mode: str, workers: int = 3) -> Path:
    spec = ClusterSpec(workers=workers, legacy_keras=False, env={"FAKE_MODE": mode})
    return export_cell(FAKE_WORKER, tmp_path / "job", spec, python=sys.executable).run_local


def worker_pids(directory: Path, workers: int, timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            logs = [(directory / f"worker-{i}.log").read_text() for i in range(workers)]
        except FileNotFoundError:
            logs = []
        if logs and all("pid" in log for log in logs):
            return [int(log.split("pid")[1].split()[0]) for log in logs]
        time.sleep(0.1)
    raise AssertionError("fake workers did not start")


def assert_gone(pids: list[int]) -> None:
    for pid in pids:
        alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert not alive, f"worker process {pid} is still running"


def test_run_local_succeeds_when_every_worker_does(tmp_path: Path) -> None:
    script = export_fake(tmp_path, "ok")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for i in range(3):
        assert f"worker {i} done" in (script.parent / f"worker-{i}.log").read_text()
        assert f"worker {i}: exit 0" in proc.stdout


def test_run_local_fails_and_stops_the_others_when_one_worker_fails(tmp_path: Path) -> None:
    script = export_fake(tmp_path, "fail1")
    start = time.monotonic()
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = worker_pids(script.parent, 3)
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, (out, err)
    assert "worker 1 failed (exit 3)" in err
    assert elapsed < 30, elapsed  # the others sleep 120 s: they were stopped, not waited for
    assert_gone(pids)


def test_run_local_ctrl_c_stops_every_worker(tmp_path: Path) -> None:
    script = export_fake(tmp_path, "hang", workers=2)
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = worker_pids(script.parent, 2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err
    assert_gone(pids)
