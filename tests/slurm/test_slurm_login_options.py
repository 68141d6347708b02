"""``--slurm-login``: option checks and the login-node reaper's shell logic (a real bash, with a
``scancel`` stand-in on PATH that records its call). No Slurm needed."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

import pytest

from mwnotebook.config import slurm_options as cmd
from mwnotebook.config.options import add_cluster_arguments, spec_from_options
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.errors import ConfigError


def test_option_makes_a_login_spec_and_launcher() -> None:
    from mwnotebook.launchers import make_launcher
    from mwnotebook.launchers.slurm.shell import LoginSlurm

    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    spec = spec_from_options(parser.parse_args(["--slurm", "-p gpu", "--slurm-login", "alice@login1:2222"]))
    assert spec.slurm_login == "alice@login1:2222"
    launcher = make_launcher(spec)
    assert isinstance(launcher.shell, LoginSlurm)  # type: ignore[attr-defined]
    assert (launcher.shell.login.user, launcher.shell.login.host, launcher.shell.login.port) == (  # type: ignore[attr-defined]
        "alice", "login1", 2222)


def test_inside_an_allocation_is_not_assumed_with_a_login_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """SLURM_JOB_ID on the laptop says nothing about the cluster behind the login node."""
    from mwnotebook.launchers.slurm.launcher import SlurmLauncher

    monkeypatch.setenv("SLURM_JOB_ID", "77")
    assert SlurmLauncher.from_spec(ClusterSpec(slurm="")).job_id == "77"
    assert SlurmLauncher.from_spec(ClusterSpec(slurm="", slurm_login="login1")).job_id is None


@pytest.mark.parametrize("fields, message", [
    (dict(slurm_login="login1"), "give --slurm"),
    (dict(slurm="", slurm_login="login1*2"), "one login host"),
    (dict(slurm="", slurm_login="a b"), "bad host"),
])
def test_bad_login_specs(fields: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterSpec(**fields)


def _reaper(tmp_path: Path, limit: float | None) -> tuple[subprocess.Popen[bytes], Path]:
    record = tmp_path / "scancelled"
    fake = tmp_path / "bin" / "scancel"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f'#!/bin/sh\necho "$@" > {record}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    proc = subprocess.Popen(cmd.reaper_argv("42", limit), stdin=subprocess.PIPE, env=env)
    return proc, record


@pytest.mark.parametrize("limit", [None, 30.0])
def test_reaper_cancels_when_its_stdin_closes(tmp_path: Path, limit: float | None) -> None:
    proc, record = _reaper(tmp_path, limit)
    assert proc.stdin is not None
    if limit:  # only the login node's reaper is pinged
        proc.stdin.write(b"ping\n")
        proc.stdin.flush()
    time.sleep(0.3)
    assert proc.poll() is None and not record.exists()
    proc.stdin.close()
    proc.wait(timeout=10)
    assert record.read_text().split() == ["42"]


def test_login_reaper_cancels_after_silence_but_not_while_pinged(tmp_path: Path) -> None:
    proc, record = _reaper(tmp_path, 1.0)
    assert proc.stdin is not None
    for _ in range(6):  # 1.8 s of pings every 0.3 s: longer than the limit, still alive
        proc.stdin.write(b"ping\n")
        proc.stdin.flush()
        time.sleep(0.3)
    assert proc.poll() is None and not record.exists()
    proc.wait(timeout=10)  # silence: cancels by itself, stdin still open
    assert record.read_text().split() == ["42"]
    proc.stdin.close()
