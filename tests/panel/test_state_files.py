"""The state files and the control channel of mwnotebook/registry/, on their own (no cluster)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.registry import control, orphans, processes, state
from mwnotebook.registry.publication import Publication
from mwnotebook.shared.events import RunRestarted, WorkerOutput, WorkerStateChanged
from tests._shared.waits import wait_for

NOBODY = 65534


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    d = tmp_path / "mwnotebook"
    state.ensure_dir(d)
    return d


def sleeper(new_session: bool = True) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=new_session)


def test_a_state_file_is_private_and_replaced_whole(directory: Path) -> None:
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    path = state.state_path(directory, "0123456789ab")
    state.write_state(path, {"version": state.VERSION, "id": "0123456789ab", "n": 1})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    state.write_state(path, {"version": state.VERSION, "id": "0123456789ab", "n": 2})
    assert state.read_state(path) == {"version": state.VERSION, "id": "0123456789ab", "n": 2}
    assert os.listdir(directory) == [path.name]  # no temporary file left behind
    (directory / "cluster-zz.json").write_text("{}")  # not an id
    (directory / "cluster-aaaaaaaaaaaa.json").write_text("not json")
    assert [p.name for p, _ in state.read_all(directory)] == [path.name]


def test_ids_from_urls_are_checked() -> None:
    assert state.valid_id(state.new_id())
    for bad in ("../etc", "", "ABCDEF012345", "a" * 40):
        assert not state.valid_id(bad)
        with pytest.raises(ValueError, match="not a cluster id"):
            state.state_path(Path("/tmp"), bad)


@pytest.mark.skipif(os.getuid() != 0, reason="making a file of another user needs root")
def test_another_users_file_is_refused_and_not_listed(directory: Path) -> None:
    path = state.state_path(directory, "0123456789ab")
    state.write_state(path, {"version": state.VERSION, "id": "0123456789ab"})
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(state.NotYours, match="uid 65534"):
        state.read_state(path)
    assert list(state.read_all(directory)) == []
    sock = directory / "x.sock"
    sock.write_text("")
    os.chown(sock, NOBODY, NOBODY)
    with pytest.raises(control.ControlError, match="refused"):
        control.send(sock, "stop")


def test_a_pid_is_only_the_process_that_started_then() -> None:
    proc = sleeper()
    try:
        started = processes.start_time(proc.pid)
        assert started is not None and processes.is_running(proc.pid, started)
        assert not processes.is_running(proc.pid, started + 1)  # a reused pid is another process
        assert not processes.kill(proc.pid, started + 1)
        assert proc.poll() is None
        assert processes.kill(proc.pid, started)
        proc.wait(10)
        assert not processes.is_running(proc.pid, started)
    finally:
        proc.kill()
        proc.wait()


def test_a_dead_owners_file_is_orphaned_then_its_processes_end_and_it_goes(directory: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "pass"])
    owner_start = processes.start_time(owner.pid)
    owner.wait()
    worker = sleeper()
    path = state.state_path(directory, "0123456789ab")
    document = {"version": state.VERSION, "id": "0123456789ab", "state": "idle",
                "owner": {"pid": owner.pid, "start_time": owner_start},
                "control": str(directory / "cluster-0123456789ab.sock"),
                "workers": [{"index": 0, "pid": worker.pid, "pid_start": processes.start_time(worker.pid),
                             "local": True},
                            {"index": 1, "pid": 1, "pid_start": None, "local": False}]}  # remote: never signalled
    state.write_state(path, document)
    try:
        shown = orphans.sweep_one(path, document, now=100.0, linger=3.0)
        assert shown is not None and shown["state"] == "orphaned"
        assert shown["cleanup"] == [f"killed pid {worker.pid}"]
        worker.wait(10)
        again = state.read_state(path)
        assert again is not None and again["orphaned_at"] == 100.0  # the mark is kept in the file
        assert orphans.sweep_one(path, again, now=101.0, linger=3.0)["state"] == "orphaned"  # type: ignore[index]
        assert orphans.sweep_one(path, again, now=103.5, linger=3.0) is None
        assert not path.exists()
    finally:
        worker.kill()
        worker.wait()


def test_a_live_owners_file_is_left_alone(directory: Path) -> None:
    document = {"version": state.VERSION, "owner": {"pid": os.getpid(), "start_time": processes.start_time(os.getpid())}}
    path = state.state_path(directory, "0123456789ab")
    state.write_state(path, document)
    assert orphans.sweep_one(path, document) is document
    assert path.exists()


def test_the_control_channel_takes_known_actions_only(directory: Path) -> None:
    asked: list[str] = []
    listener = control.ControlListener(directory / "c.sock", lambda action: asked.append(action) or None)
    try:
        assert stat.S_IMODE((directory / "c.sock").stat().st_mode) == 0o600
        control.send(directory / "c.sock", "interrupt")
        control.send(directory / "c.sock", "stop")
        assert asked == ["interrupt", "stop"]
        with pytest.raises(ValueError, match="unknown action"):
            control.send(directory / "c.sock", "reboot")
    finally:
        listener.close()
    assert not (directory / "c.sock").exists()
    with pytest.raises(control.ControlError, match="no control socket"):
        control.send(directory / "c.sock", "stop")


def test_the_channel_works_in_a_runtime_directory_deeper_than_a_socket_path_allows(tmp_path: Path) -> None:
    """A Jupyter runtime directory can be deep (a long home; pytest-xdist's temporary folders made
    the first CI run fail with "AF_UNIX path too long"): the socket still lives there and answers."""
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "mwnotebook"
    state.ensure_dir(deep)
    path = deep / "cluster-0123456789abcdef.sock"
    assert len(os.fsencode(str(path))) > 108
    asked: list[str] = []
    listener = control.ControlListener(path, lambda action: asked.append(action) or None)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        control.send(path, "stop")
        assert asked == ["stop"]
    finally:
        listener.close()
    assert not path.exists()


def test_the_channel_passes_on_the_owners_refusal(directory: Path) -> None:
    listener = control.ControlListener(directory / "c.sock",
                                       lambda action: control.Refusal("busy", "a stop from the panel is under way"))
    try:
        with pytest.raises(control.ControlError, match="under way") as refused:
            control.send(directory / "c.sock", "restart")
        assert refused.value.code == "busy"
    finally:
        listener.close()


class FakeCluster:
    """A cluster's public face, for the publication's pure logic."""

    def __init__(self) -> None:
        self.spec = ClusterSpec(workers=2)
        self.started = False
        self.calls: list[str] = []
        self.event = threading.Event()

    def status(self) -> list[Any]:
        from mwnotebook.engine.cluster_status import WorkerInfo
        return [WorkerInfo(index=i, host="localhost", pid=os.getpid(), state="idle", alive=True,
                           tf_config={"task": {"index": i}}, on_this_machine=True) for i in range(2)]

    def scheduler_status(self) -> None:
        return None

    def interrupt(self) -> None:
        self.calls.append("interrupt")

    def restart(self) -> None:
        self.calls.append("restart")
        self.event.set()

    def stop(self) -> None:
        self.calls.append("stop")
        self.event.set()



def test_a_publication_follows_start_cell_error_and_stop(directory: Path) -> None:
    cluster = FakeCluster()
    pub = Publication(cluster, directory=directory, enabled=True, interval=0.05)
    sink = pub.watch(None)
    assert sink is not None and pub.path is not None
    path = pub.path
    assert wait_for(lambda: (state.read_state(path) or {}).get("state") == "starting")
    cluster.started = True
    pub.settled()
    doc = wait_for(lambda: (d := state.read_state(path)) and d["workers"] and d)
    assert doc["state"] == "idle" and [w["index"] for w in doc["workers"]] == [0, 1]
    assert doc["workers"][0]["pid_start"] == processes.start_time(os.getpid())
    pub.cell("import time\ntime.sleep(1)\n")
    sink = pub.watch(None)
    assert sink is not None
    sink(WorkerStateChanged(worker=1, state="running"))
    sink(WorkerOutput(worker=1, msg_type="error", content={"ename": "ValueError", "evalue": "bad"}))
    sink(RunRestarted(restart=1, max_restarts=1, cause="lost"))
    doc = wait_for(lambda: (d := state.read_state(path)) and d["state"] == "running" and d["restarts"] and d)
    assert doc["cell"]["text"] == "import time\ntime.sleep(1)"
    assert doc["workers"][1]["state"] == "running" and doc["workers"][1]["last_error"] == "ValueError: bad"
    assert doc["last_error"] == "[1] ValueError: bad"
    pub.settled()
    assert wait_for(lambda: (state.read_state(path) or {}).get("last_cell"))
    pub.stopped()
    assert not path.exists() and os.listdir(directory) == []


def test_a_stop_from_the_panel_reaches_the_cluster(directory: Path) -> None:
    cluster = FakeCluster()
    pub = Publication(cluster, directory=directory, enabled=True, interval=0.05)
    pub.watch(None)
    cluster.started = True
    pub.settled()
    doc = wait_for(lambda: state.read_state(pub.path) if pub.path else None)  # type: ignore[arg-type]
    control.send(doc["control"], "stop")
    assert cluster.event.wait(10)
    assert cluster.calls == ["stop"]
    pub.stopped()


def test_a_disabled_publication_writes_nothing(directory: Path) -> None:
    pub = Publication(FakeCluster(), directory=directory, enabled=False)
    assert pub.watch(None) is None
    pub.settled()
    pub.stopped()
    assert os.listdir(directory) == []


def test_the_engine_needs_no_jupyter_server() -> None:
    """A plain ipykernel + nbclient run never loads the server extension or jupyter_server."""
    code = ("import sys, mwnotebook.engine.cluster, mwnotebook.registry.publication\n"
            "loaded = [m for m in sys.modules if m.startswith(('jupyter_server', 'mwnotebook.server'))]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_forked_child_at_exit_leaves_its_parents_file(directory: Path) -> None:
    from mwnotebook.registry import publication as module
    cluster = FakeCluster()
    pub = Publication(cluster, directory=directory, enabled=True, interval=0.05)
    pub.watch(None)
    cluster.started = True
    pub.settled()
    try:
        path = pub.path
        assert path is not None and wait_for(path.exists)
        child = os.fork()
        if child == 0:  # what a forked child's interpreter runs at exit
            module._remove_at_exit()  # noqa: SLF001 - the atexit hook itself
            os._exit(0)
        assert os.waitpid(child, 0)[1] == 0
        assert path.exists() and (directory / f"cluster-{pub.cluster_id}.sock").exists()
    finally:
        pub.stopped()
