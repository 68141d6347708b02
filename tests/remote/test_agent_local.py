"""The remote agent (processes/shipped/remote_agent.py) driven directly over pipes, without SSH or root: the same
bootstrap, the same stdin protocol. Runs wherever Python and ipykernel do."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mwnotebook.processes import shipped
from mwnotebook.processes.shipped.remote_agent import BOOTSTRAP
from testbed.processes import running, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SOURCE = shipped.bundle("remote_agent.py")  # what the launchers send


def agent(config: dict[str, Any], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-u", "-c", BOOTSTRAP], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stdin is not None
    proc.stdin.write(f"{len(SOURCE)}\n{SOURCE}{json.dumps(config)}\n")
    proc.stdin.flush()
    return proc


def event(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"agent ended without an event: {proc.stderr.read() if proc.stderr else ''}"
    return json.loads(line)


def test_agent_source_is_ascii() -> None:
    # The remote interpreter may decode stdin as ASCII (C locale): keep the source plain.
    SOURCE.encode("ascii")


def test_ports_are_held_until_stdin_closes() -> None:
    proc = agent({"role": "ports", "count": 2, "require": ["json"]},
                 env={"SSH_CONNECTION": "10.0.0.1 50000 10.0.0.2 22"})
    try:
        reply = event(proc)
        assert reply["event"] == "ports" and reply["address"] == "10.0.0.2"
        ports = reply["ports"]
        assert len(set(ports)) == 2
        for port in ports:
            with socket.socket() as probe, pytest.raises(OSError) as info:
                probe.bind(("0.0.0.0", port))
            assert info.value.errno == errno.EADDRINUSE
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(timeout=10) == 0
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", ports[0]))


def test_missing_modules_are_reported() -> None:
    proc = agent({"role": "kernel", "key": "k", "require": ["json", "no_such_module_mw"]})
    reply = event(proc)
    assert reply == {"event": "error", "kind": "missing", "modules": ["no_such_module_mw"],
                     "python": sys.executable, "version": sys.version.split()[0]}
    assert proc.wait(timeout=10) == 3


def test_kernel_kill_and_stdin_eof() -> None:
    key = "secret-" + os.urandom(8).hex()
    for how in ("kill", "eof"):
        proc = agent({"role": "kernel", "key": key, "require": ["ipykernel"],
                      "env": {"MW_TEST": "1"}, "timeout": 60})
        try:
            ready = event(proc)
            assert ready["event"] == "ready", ready
            pid, folder = ready["pid"], Path(ready["dir"])
            assert sorted(ready["ports"]) == sorted(["shell_port", "iopub_port", "stdin_port",
                                                     "control_port", "hb_port"])
            info = json.loads((folder / "kernel.json").read_text())
            assert info["key"] == key and info["ip"] == "127.0.0.1" and info["shell_port"] > 0
            assert key not in Path(f"/proc/{pid}/cmdline").read_text()
            assert Path(f"/proc/{pid}/environ").read_bytes().count(b"MW_TEST=1") == 1
            if how == "kill":
                proc.stdin.write("kill\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
                assert event(proc) == {"event": "exit", "returncode": -signal.SIGKILL,
                                       "description": "killed by SIGKILL", "log": ""}
            else:
                proc.stdin.close()  # type: ignore[union-attr]
            assert proc.wait(timeout=10) == 0
            assert wait_gone(pid, timeout=5), f"kernel survived {how}"
            assert not folder.exists()
        finally:
            if proc.poll() is None:
                proc.kill()


TEMPLATE_SOURCE = shipped.bundle("remote_template.py")


def test_template_source_is_ascii() -> None:
    TEMPLATE_SOURCE.encode("ascii")


def test_template_forks_kernels_that_end_with_their_own_agent() -> None:
    """The template role without TensorFlow (``preload`` empty: only the kernel's modules), so that
    the lifetimes are checked in seconds: a forked kernel's parent is the template, yet it ends with
    the agent that asked for it, survives its template, and an unusable template means a fresh
    kernel with a note."""
    template = agent({"role": "template", "source": TEMPLATE_SOURCE, "require": ["ipykernel"],
                      "preload": [], "env": {"MW_TEMPLATE": "1"}})
    kernels: list[subprocess.Popen[str]] = []
    try:
        ready = event(template)
        assert ready["event"] == "ready" and ready["context_created"] is False, ready
        config = {"role": "kernel", "key": "secret-" + os.urandom(8).hex(), "require": ["ipykernel"],
                  "env": {"MW_TEST": "1"}, "timeout": 60, "template": ready["socket"]}

        def forked_kernel() -> tuple[subprocess.Popen[str], int]:
            proc = agent(config)
            kernels.append(proc)
            started = event(proc)
            assert started["event"] == "ready" and started["forked"] is True, started
            pid = started["pid"]
            assert Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(ready["pid"])
            assert config["key"] not in Path(f"/proc/{pid}/cmdline").read_text()
            return proc, pid  # (its /proc environ is the template's: the worker's is set after fork)

        # 1. Its agent is killed (kill -9: no clean-up of its own): the kernel ends by itself.
        proc, pid = forked_kernel()
        proc.kill()
        assert wait_gone(pid), "a forked kernel outlived its agent"
        # 2. The template is killed: the running kernel is not affected; its agent still ends it.
        proc, pid = forked_kernel()
        template.kill()
        template.wait(timeout=10)
        time.sleep(0.5)
        assert running(pid), "the kernel died with its template"
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(timeout=10) == 0 and wait_gone(pid)
        assert Path(ready["socket"]).parent.exists()  # a killed template leaves its directory...
        # 3. A dead template: a fresh kernel, and the agent says why.
        proc = agent(config)
        kernels.append(proc)
        started = event(proc)
        assert started["event"] == "ready" and started["forked"] is False
        assert "template" in started["note"], started
        proc.stdin.write("kill\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        assert event(proc)["description"] == "killed by SIGKILL"
        # ...until the next template starts (and the host's temp dir does not fill up).
        second = agent({"role": "template", "source": TEMPLATE_SOURCE, "require": ["ipykernel"], "preload": []})
        kernels.append(second)
        assert event(second)["event"] == "ready"
        assert not Path(ready["socket"]).parent.exists()
    finally:
        for proc in [template, *kernels]:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def test_the_kernel_module_follows_what_the_kernels_interpreter_can_import(tmp_path: Path) -> None:
    """mwnotebook's worker kernel where the kernel's environment imports it, else ipykernel_launcher
    (a ``PYTHONPATH`` whose ``mwnotebook`` has no worker kernel stands in for a host without it)."""
    from mwnotebook.processes.shipped.remote_agent import WORKER_KERNEL_ENV, has_worker_kernel

    (tmp_path / "mwnotebook").mkdir()
    (tmp_path / "mwnotebook" / "__init__.py").write_text("")
    assert has_worker_kernel(dict(os.environ), None)
    # (cwd: the kernel's directory comes first on its path, as with ``python -m``; not this checkout)
    assert not has_worker_kernel({**os.environ, "PYTHONPATH": str(tmp_path)}, str(tmp_path))
    assert not has_worker_kernel({**os.environ, WORKER_KERNEL_ENV: "0"}, None)


def test_stacks_are_read_back_on_the_kernels_host() -> None:
    """``stacks``: the agent signals its kernel (mwnotebook's worker kernel, importable here) and
    answers with the dump it wrote, main thread named; once the kernel is gone it says so."""
    proc = agent({"role": "kernel", "key": "k-" + os.urandom(8).hex(), "require": ["ipykernel"], "timeout": 60})
    try:
        ready = event(proc)
        assert ready["event"] == "ready", ready
        proc.stdin.write("stacks\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        answer = event(proc)
        assert answer["event"] == "stacks" and answer["note"] == "", answer
        threads = [int(t, 16) for t in re.findall(r"^(?:Current thread|Thread) (0x[0-9a-f]+)", answer["text"], re.M)]
        assert answer["main"] in threads, (answer["main"], threads)
        assert 'File "' in answer["text"]
        proc.stdin.write("kill\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        assert event(proc)["event"] == "exit"
    finally:
        if proc.poll() is None:
            proc.kill()
