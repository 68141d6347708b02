"""Nothing signalled that is not ours: the sweep of a dead owner's cluster and the panel's
interrupt touch only processes of this machine whose start time was recorded, and cancel only a
Slurm allocation the launcher made.

An owner process publishes a cluster whose tasks are the real remote kernel handle classes (Ray's,
Slurm's) made without a remote host, each naming the pid of a live LOCAL process (what a pid from
another node may well be here). The owner is SIGKILLed and the sweep runs: the local process lives.
``scancel`` is a stand-in on PATH that records its arguments (no Slurm here).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mwnotebook.registry import control, orphans, processes, state
from mwnotebook.server.service import STATUS, ClusterService, ServiceError
from tests._shared.waits import wait_for

OWNER = textwrap.dedent("""
    import asyncio, json, sys, time
    from pathlib import Path
    from mwnotebook.config.spec import ClusterSpec
    from mwnotebook.engine.cluster_status import cluster_status
    from mwnotebook.registry.publication import Publication

    spec = ClusterSpec(**json.loads(sys.argv[1]))
    pid, job, directory = int(sys.argv[2]), json.loads(sys.argv[3]), Path(sys.argv[4])
    from mwnotebook.launchers.remote.kernel_handle import RemoteKernelHandle as Handle  # Ray's and Slurm's

    class Worker:
        def __init__(self, index):
            handle = object.__new__(Handle)  # the real class and its own declarations, no remote host
            handle.index, handle.host, handle._pid = index, f"10.77.0.{index + 2}", pid
            self.handle = handle

    class Owner:  # the blocking Cluster facade's public face
        spec, started = spec, True
        def status(self):
            async def ask():
                for w in workers:
                    w.handle._ended = asyncio.Event()
                return await cluster_status(spec.layout, ["10.77.0.2:2222", "10.77.0.3:2222"],
                                            ["idle", "idle"], workers, None)
            return asyncio.run(ask())
        def scheduler_status(self):
            return job
        def interrupt(self): pass
        def restart(self): pass
        def stop(self): pass

    workers = [Worker(0), Worker(1)]
    publication = Publication(Owner(), directory=directory, enabled=True, interval=0.05)
    publication.watch(None)
    publication.settled()
    print(publication.path, flush=True)
    time.sleep(600)
""")


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    d = tmp_path / "mwnotebook"
    state.ensure_dir(d)
    return d


@pytest.fixture
def scancel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``scancel`` first on PATH that only writes down what it was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scancel.calls"
    script = bin_dir / "scancel"
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)


def ended(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


def published_then_owner_killed(directory: Path, spec: dict[str, Any], pid: int,
                                 job: dict[str, Any] | None) -> tuple[Path, dict[str, Any]]:
    """The owner publishes its cluster (tasks naming ``pid``), is SIGKILLed; the file and its document."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, json.dumps(spec), str(pid), json.dumps(job),
                              str(directory)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        path = Path(owner.stdout.readline().strip())
        document = wait_for(lambda: (d := state.read_state(path)) and d["workers"] and d, 30)
    finally:
        owner.kill()  # SIGKILL: no atexit, the file stays
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    return path, document


CASES = {
    "ray": ({"ray": "auto", "workers": 2}, None, False),
    "bare --slurm, made by us": ({"slurm": "", "workers": 2},
                                 {"job_id": "77", "nodes": ["n1", "n2"], "state": "RUNNING", "owned": True}, True),
    "bare --slurm inside the user's salloc": ({"slurm": "", "workers": 2},
                                              {"job_id": "78", "nodes": ["n1"], "state": "RUNNING", "owned": False},
                                              False),
    "--slurm-job": ({"slurm_job": "79", "workers": 2},
                    {"job_id": "79", "nodes": ["n1"], "state": "RUNNING", "owned": False}, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_dead_owners_remote_workers_are_never_signalled_and_only_our_job_is_cancelled(
        case: str, directory: Path, scancel: Path) -> None:
    spec, job, cancels = CASES[case]
    local = sleeper()  # a live process here whose pid number a remote worker also has
    try:
        path, document = published_then_owner_killed(directory, spec, local.pid, job)
        shown = orphans.sweep_one(path, document)
        assert shown is not None and shown["state"] == "orphaned"
        assert not [line for line in shown["cleanup"] if line.startswith("killed")]
        assert local.poll() is None and processes.is_running(local.pid, processes.start_time(local.pid))
        assert document["engine"] == ("ray" if "ray" in spec else "slurm")
        assert [(w["pid"], w["local"], w["pid_start"]) for w in document["workers"]] == [(local.pid, False, None)] * 2
        if job is not None:
            assert document["scheduler"]["owned"] is job["owned"]  # as the launcher said, not guessed
        if cancels:
            assert shown["cleanup"] == [f"cancelled Slurm job {job['job_id']}"]  # type: ignore[index]
            assert scancel.read_text().split() == [job["job_id"]]  # type: ignore[index]
        else:
            assert shown["cleanup"] == [] and not scancel.exists()
        wait_for(lambda: orphans.sweep_one(path, state.read_state(path) or document) is None, 10)
        assert local.poll() is None
    finally:
        ended(local)


def test_a_pid_without_a_start_time_is_never_signalled(directory: Path) -> None:
    proc = sleeper()
    try:
        assert not processes.is_running(proc.pid, None)
        assert not processes.kill(proc.pid, None)
        document = {"workers": [{"index": 0, "pid": proc.pid, "pid_start": None, "local": True}]}
        assert orphans.local_processes(document) == [] and orphans.end_processes(document) == []
        assert proc.poll() is None
        # an owner whose start time is unknown counts as alive while its pid runs: no sweep on a guess
        path = state.state_path(directory, "0123456789ab")
        owned = {"version": state.VERSION, "owner": {"pid": proc.pid, "start_time": None}, "workers": []}
        state.write_state(path, owned)
        assert orphans.owner_alive(owned) and orphans.sweep_one(path, owned) is owned
    finally:
        ended(proc)


def test_the_panels_interrupt_of_a_dead_owners_cluster_reaches_only_its_own_processes(directory: Path) -> None:
    """Only the task marked local with its start time gets SIGINT; a remote task's pid number and a
    local pid without a start time are left alone."""
    ours, remote_number, no_start = sleeper(), sleeper(), sleeper()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_start = processes.start_time(dead.pid)
    dead.wait()
    cluster_id = "0123456789ab"
    path = state.state_path(directory, cluster_id)
    state.write_state(path, {
        "version": state.VERSION, "id": cluster_id, "state": "idle",
        "owner": {"pid": dead.pid, "start_time": dead_start},
        "workers": [{"index": 0, "pid": ours.pid, "pid_start": processes.start_time(ours.pid), "local": True},
                    {"index": 1, "pid": remote_number.pid, "pid_start": None, "local": False},
                    {"index": 2, "pid": no_start.pid, "pid_start": None, "local": True}]})
    try:
        assert ClusterService(directory).act(cluster_id, "interrupt") == "server"
        assert ours.wait(10) != 0  # KeyboardInterrupt
        assert remote_number.poll() is None and no_start.poll() is None
    finally:
        for proc in (ours, remote_number, no_start):
            ended(proc)


@pytest.mark.parametrize(("code", "status"), [("busy", 409), ("forbidden", 403), ("bad_request", 400)])
def test_the_owners_refusal_code_is_the_apis_status(directory: Path, code: control.Code, status: int) -> None:
    """The owner (this live process) refuses with a code; the service raises it with that code, and
    the one table gives the status (whatever the refusal's words say)."""
    cluster_id = "0123456789ab"
    socket_path = state.socket_path(directory, cluster_id)
    listener = control.ControlListener(socket_path, lambda action: control.Refusal(code, "no, in any words"))
    state.write_state(state.state_path(directory, cluster_id), {
        "version": state.VERSION, "id": cluster_id, "state": "idle", "control": str(socket_path),
        "owner": {"pid": os.getpid(), "start_time": processes.start_time(os.getpid())}, "workers": []})
    try:
        with pytest.raises(ServiceError) as refused:
            ClusterService(directory).act(cluster_id, "stop")
        assert refused.value.code == code and refused.value.status == status == STATUS[code]
    finally:
        listener.close()


def test_every_control_code_has_a_status() -> None:
    assert set(control.CODES) | {control.UNREACHABLE, "not_found"} == set(STATUS)


def test_a_killed_owners_local_worker_is_still_ended(directory: Path) -> None:
    """The other side: a task its handle marked local, with its start time, is killed by the sweep."""
    local = sleeper()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_start = processes.start_time(dead.pid)
    dead.wait()
    path = state.state_path(directory, "0123456789ab")
    document = {"version": state.VERSION, "id": "0123456789ab", "state": "idle",
                "owner": {"pid": dead.pid, "start_time": dead_start},
                "workers": [{"index": 0, "pid": local.pid, "pid_start": processes.start_time(local.pid),
                             "local": True}]}
    state.write_state(path, document)
    try:
        shown = orphans.sweep_one(path, document)
        assert shown is not None and shown["cleanup"] == [f"killed pid {local.pid}"]
        assert local.wait(10) == -signal.SIGKILL
    finally:
        ended(local)


def dead_owners_file(directory: Path, worker: subprocess.Popen[bytes]) -> Path:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_start = processes.start_time(dead.pid)
    dead.wait()
    path = state.state_path(directory, "ba9876543210")
    state.write_state(path, {"version": state.VERSION, "id": "ba9876543210", "state": "idle",
                             "owner": {"pid": dead.pid, "start_time": dead_start},
                             "workers": [{"index": 0, "pid": worker.pid, "local": True,
                                          "pid_start": processes.start_time(worker.pid)}]})
    return path


def test_a_publications_writer_never_sweeps_other_kernels_files(directory: Path) -> None:
    """The sweep left the writer thread: a cluster's publication writes its own file only."""
    from mwnotebook.config.spec import ClusterSpec
    from mwnotebook.registry.publication import Publication

    class Owner:
        spec, started = ClusterSpec(workers=1), True

        def status(self) -> list[Any]:
            return []

        def scheduler_status(self) -> None:
            return None

        def interrupt(self) -> None: ...
        def restart(self) -> None: ...
        def stop(self) -> None: ...

    worker = sleeper()
    other = dead_owners_file(directory, worker)
    publication = Publication(Owner(), directory=directory, enabled=True, interval=0.05)
    try:
        publication.watch(None)
        publication.settled()
        own = publication.path
        assert own is not None and wait_for(lambda: (d := state.read_state(own)) and d["state"] == "idle")
        assert "orphaned_at" not in (state.read_state(other) or {}) and worker.poll() is None
    finally:
        publication.stopped()
        ended(worker)


def test_a_kernel_sweeps_once_when_the_extension_loads(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    monkeypatch.setattr(orphans, "_swept", threading.Event())  # as in a fresh kernel
    worker = sleeper()
    try:
        other = dead_owners_file(directory, worker)
        assert orphans.sweep_once(directory) is True
        assert worker.wait(10) == -signal.SIGKILL  # the dead owner's local worker, by its start time
        wait_for(lambda: (state.read_state(other) or {}).get("state") == "orphaned")
        assert orphans.sweep_once(directory) is False
    finally:
        ended(worker)
