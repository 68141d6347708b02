"""The teacher's caps: parsing (config/class_caps.py), the thread shares, the refusals' words and
arithmetic and the claims of starts under way (engine/class_caps.py), against state files written here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mwnotebook.config.class_caps import MIB, ClassCaps, Footprint, cluster_tasks
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import startup_env, with_thread_defaults, worker_envs
from mwnotebook.engine import class_caps
from mwnotebook.engine.class_caps import CapExceeded, admit, document_tasks, running_clusters
from mwnotebook.errors import ConfigError
from mwnotebook.frontend.notebook.views import caps_text
from mwnotebook.registry import processes, state

# -- parsing -------------------------------------------------------------------------------------

def test_no_variable_is_no_cap() -> None:
    caps = ClassCaps.from_environ({"MWNOTEBOOK_MAX_WORKERS": "", "CPU_LIMIT": " "})
    assert caps == ClassCaps() and not caps.counts_running and caps.lines() == [] and caps.thread_env(4) == {}


def test_the_three_variables_as_a_hub_exports_them() -> None:
    caps = ClassCaps.from_environ({"MWNOTEBOOK_MAX_WORKERS": "3", "CPU_LIMIT": "1.5", "MEM_LIMIT": "2147483648"})
    assert (caps.max_workers, caps.cpu_limit, caps.mem_limit) == (3, 1.5, 2 ** 31)
    assert caps.counts_running
    assert ClassCaps.from_environ({"MEM_LIMIT": "4G"}).mem_limit == 4 * 2 ** 30
    assert ClassCaps.from_environ({"MEM_LIMIT": "512MiB"}).mem_limit == 512 * MIB


@pytest.mark.parametrize(("name", "value", "words"), [
    ("MWNOTEBOOK_MAX_WORKERS", "four", "is not a whole number"),
    ("MWNOTEBOOK_MAX_WORKERS", "0", "at least 1"),
    ("MWNOTEBOOK_MAX_WORKERS", "-2", "at least 1"),
    ("MWNOTEBOOK_MAX_WORKERS", "2.5", "is not a whole number"),
    ("CPU_LIMIT", "two", "is not a number"),
    ("CPU_LIMIT", "0", "above 0"),
    ("CPU_LIMIT", "-1", "above 0"),
    ("CPU_LIMIT", "nan", "above 0"),
    ("MEM_LIMIT", "lots", "is not a size"),
    ("MEM_LIMIT", "0", "above 0 bytes"),
    ("MEM_LIMIT", "-5", "is not a size"),
])
def test_a_bad_value_names_its_variable(name: str, value: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ClassCaps.from_environ({name: value})
    assert f"{name}={value!r}" in str(caught.value) and words in str(caught.value)


def test_a_task_cap_without_state_files_is_refused() -> None:
    with pytest.raises(ConfigError, match="MWNOTEBOOK_REGISTRY=0 turns off"):
        ClassCaps.from_environ({"MWNOTEBOOK_MAX_WORKERS": "2", "MWNOTEBOOK_REGISTRY": "0"})


# -- threads --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("cpu", "tasks", "share"), [(2, 2, 1), (2, 4, 1), (0.5, 1, 1), (8, 2, 4), (8, 3, 2), (3.9, 1, 3)])
def test_each_task_gets_its_share_of_the_cpu_limit(cpu: float, tasks: int, share: int) -> None:
    caps = ClassCaps(cpu_limit=cpu)
    assert caps.threads_per_task(tasks) == share
    assert caps.thread_env(tasks) == dict.fromkeys(
        ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"), str(share))


def test_the_users_own_thread_variables_win() -> None:
    caps = ClassCaps.from_environ({"CPU_LIMIT": "4", "OMP_NUM_THREADS": "3"})
    assert caps.thread_env(2) == {"TF_NUM_INTRAOP_THREADS": "2", "TF_NUM_INTEROP_THREADS": "2"}
    spec = ClusterSpec(workers=2, cpu=True, env={"TF_NUM_INTRAOP_THREADS": "7"})
    run = with_thread_defaults(spec, caps.thread_env(2))
    env = worker_envs(run, ["127.0.0.1:1", "127.0.0.1:2"])[1]
    assert env["TF_NUM_INTRAOP_THREADS"] == "7" and env["TF_NUM_INTEROP_THREADS"] == "2"
    assert "OMP_NUM_THREADS" not in env
    assert startup_env(run)["TF_NUM_INTEROP_THREADS"] == "2"
    assert with_thread_defaults(spec, {}) is spec


def test_a_ps_cluster_counts_every_process() -> None:
    assert cluster_tasks(2) == 2
    assert cluster_tasks(2, chief=True) == 2
    assert cluster_tasks(2, ps=1) == 4  # coordinator, 2 worker servers, 1 ps
    assert cluster_tasks(2, ps=1, notebook_coordinator=True) == 3
    assert cluster_tasks(2, evaluator=True) == 3
    assert class_caps.spec_tasks(ClusterSpec(workers=2, ps=2, cpu=True)) == 5


# -- what runs: state files and claims -------------------------------------------------------------

def _document(cluster_id: str, owner: dict[str, Any], workers: list[dict[str, Any]], spec: dict[str, Any],
              created: float = 1.0, engine: str = "local", phase: str = "idle") -> dict[str, Any]:
    return {"version": state.VERSION, "id": cluster_id, "created": created, "owner": owner, "engine": engine,
            "spec": spec, "state": phase, "workers": workers}


@pytest.fixture
def live_owner() -> Any:
    """A real process of this user that the state files below name as their owner."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield {"pid": child.pid, "start_time": processes.start_time(child.pid), "session_name": "lesson01.ipynb",
           "kernel_id": "1a2b3c4d-0000", "argv0": "ipykernel_launcher.py"}
    child.kill()
    child.wait()


def _publish(directory: Path, document: dict[str, Any]) -> None:
    state.ensure_dir(directory)
    state.write_state(state.state_path(directory, document["id"]), document)


def test_the_task_list_counts_without_the_notebooks_own_process(live_owner: dict[str, Any]) -> None:
    pid = live_owner["pid"]
    listed = _document("aaaaaaaa", live_owner, [{"pid": pid, "state": "notebook"}, {"pid": 11, "state": "idle"},
                                                {"pid": 12, "state": "idle"}], {"workers": 2, "ps": 1})
    assert document_tasks(listed) == 2
    starting = _document("aaaaaaaa", live_owner, [], {"workers": 2, "ps": 1}, phase="starting")
    assert document_tasks(starting) == 4


def test_the_refusal_names_the_cap_what_runs_and_how_to_stop_it(tmp_path: Path, live_owner: dict[str, Any]) -> None:
    _publish(tmp_path, _document("0123456789ab", live_owner, [{"pid": 11}, {"pid": 12}], {"workers": 2}))
    _publish(tmp_path, _document("ba9876543210", {"pid": 999999, "start_time": 1}, [{"pid": 13}] * 4,
                                 {"workers": 4}))  # its owner is gone: not counted
    caps = ClassCaps(max_workers=3)
    with pytest.raises(CapExceeded) as caught:
        admit(caps, ClusterSpec(workers=2, cpu=True), directory=tmp_path)
    text = str(caught.value)
    assert text.startswith("MWNOTEBOOK_MAX_WORKERS=3")
    assert "it needs 2 tasks, and 2 are running (2 + 2 > 3). Nothing was started." in text
    assert (f"running: notebook 'lesson01.ipynb' (kernel 1a2b3c4d, pid {live_owner['pid']}): 2 tasks "
            "(cluster 0123456789ab, idle)") in text
    assert "`%mwcluster stop` in that notebook" in text and "clusters panel" in text
    assert "at most 1 fit now" in text
    assert not list(tmp_path.glob("claim-*"))  # a refused start claims nothing
    admit(caps, ClusterSpec(workers=1, cpu=True), directory=tmp_path).release()  # 2 + 1 fits
    # the cluster this one replaces is not counted
    admit(caps, ClusterSpec(workers=3, cpu=True), directory=tmp_path, exclude={"0123456789ab"}).release()


def test_a_start_under_way_is_counted_until_its_state_file_is_out(tmp_path: Path, live_owner: dict[str, Any]) -> None:
    caps = ClassCaps(max_workers=3)
    claim = admit(caps, ClusterSpec(workers=2, cpu=True), directory=tmp_path, owner=live_owner)
    [path] = tmp_path.glob("claim-*.json")
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(CapExceeded, match=r"running: this notebook: 2 tasks \(cluster \(starting\), starting\)"):
        admit(caps, ClusterSpec(workers=2, cpu=True), directory=tmp_path)
    # the same start published (its state file made after the claim): counted once
    me = {"pid": os.getpid(), "start_time": processes.start_time(os.getpid())}
    _publish(tmp_path, _document("cccccccccccc", me, [], {"workers": 2}, created=time.time()))
    assert [c.tasks for c in running_clusters(tmp_path)] == [2]
    claim.release()
    assert not path.exists()


def test_a_claim_whose_process_is_gone_is_not_counted_and_removed(tmp_path: Path) -> None:
    caps = ClassCaps(max_workers=2)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    state.ensure_dir(tmp_path)
    path = tmp_path / "claim-0123456789ab.json"
    state.write_state(path, {"version": state.VERSION, "pid": int(dead.stdout), "start_time": 1,
                             "created": time.time(), "tasks": 2, "local": True})
    admit(caps, ClusterSpec(workers=2, cpu=True), directory=tmp_path).release()
    assert not path.exists()


def test_two_starts_at_the_same_instant_one_is_refused(tmp_path: Path) -> None:
    """Two processes check at once (each holds the lock while it checks and claims): one gets in."""
    script = ("import sys, time\nfrom pathlib import Path\nfrom mwnotebook.config.class_caps import ClassCaps\n"
              "from mwnotebook.config.spec import ClusterSpec\nfrom mwnotebook.engine.class_caps import admit\n"
              "while time.time() < float(sys.argv[2]): pass\n"
              "try:\n    admit(ClassCaps(max_workers=3), ClusterSpec(workers=2, cpu=True), directory=Path(sys.argv[1]))\n"
              "    print('admitted')\nexcept Exception as e:\n    print(type(e).__name__)\ntime.sleep(1)\n")
    at = str(time.time() + 1.5)
    runs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), at], stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    outcomes = sorted(run.communicate(timeout=60)[0].strip() for run in runs)
    assert outcomes == ["CapExceeded", "admitted"]


# -- memory -----------------------------------------------------------------------------------------

def test_the_memory_estimate_and_its_figures(tmp_path: Path, live_owner: dict[str, Any]) -> None:
    caps = ClassCaps(mem_limit=1000 * MIB, footprint=Footprint(template=300 * MIB, task=200 * MIB))
    admit(caps, ClusterSpec(workers=3, cpu=True), directory=tmp_path).release()  # 300 + 3 x 200 = 900
    with pytest.raises(CapExceeded) as caught:
        admit(caps, ClusterSpec(workers=4, cpu=True), directory=tmp_path)
    assert str(caught.value).startswith(
        "MEM_LIMIT=1048576000 (1000 MiB, this server's memory limit) refuses this cluster: with it your local "
        "TensorFlow tasks would take about 1.1 GiB = 1 worker template x 300 MiB + 4 tasks x 200 MiB (4 asked;")
    assert str(caught.value).endswith("To go on, ask for fewer tasks (at most 3 fit now).")
    _publish(tmp_path, _document("0123456789ab", live_owner, [{"pid": 11}], {"workers": 1}))
    with pytest.raises(CapExceeded) as caught:
        admit(caps, ClusterSpec(workers=2, cpu=True), directory=tmp_path)
    assert "about 1.2 GiB = 2 worker templates x 300 MiB + 3 tasks x 200 MiB (2 asked, 1 running" in str(caught.value)
    assert "at most 1 fit now), or stop a cluster: `%mwcluster stop` in that notebook" in str(caught.value)
    # remote clusters use other machines' memory
    _publish(tmp_path, _document("0123456789ac", live_owner, [{"pid": 12}] * 8, {"workers": 8}, engine="ssh"))
    admit(caps, ClusterSpec(workers=1, cpu=True), directory=tmp_path).release()


# -- status ------------------------------------------------------------------------------------------

def test_the_caps_in_the_status() -> None:
    caps = ClassCaps(max_workers=4, cpu_limit=2.0, mem_limit=2 ** 31)
    text = caps_text(caps, {"TF_NUM_INTRAOP_THREADS": "1"}, "your running TensorFlow tasks: 2 of 4\n  this notebook: 2 tasks")
    assert text.splitlines() == [
        "teacher's caps:",
        "  MWNOTEBOOK_MAX_WORKERS=4: at most 4 TensorFlow tasks of yours at once, across your kernels",
        "  CPU_LIMIT=2: a local task's TensorFlow/OpenMP threads default to floor(2 / tasks), at least 1",
        f"  MEM_LIMIT=2147483648 (2.0 GiB): local clusters are estimated at {caps.footprint.template // MIB} MiB "
        f"per worker template + {caps.footprint.task // MIB} MiB per task",
        "  this cluster's tasks: TF_NUM_INTRAOP_THREADS=1",
        "  your running TensorFlow tasks: 2 of 4",
        "    this notebook: 2 tasks"]
    assert caps_text(ClassCaps(), {}, "") == ""
    assert json.dumps(caps.lines())  # plain strings


def test_the_engines_one_check_claims_once_per_start_and_a_check_claims_nothing(tmp_path: Path) -> None:
    """engine/class_caps.py CapsCheck: what Cluster.start, Cluster.check_caps (the magic) and
    ``mwnotebook run`` all reach."""
    caps, spec = ClassCaps(max_workers=3), ClusterSpec(workers=2, cpu=True)
    check = class_caps.CapsCheck(caps, spec, unpublished="mwnotebook run", directory=tmp_path)
    check.check()
    assert not list(tmp_path.glob("claim-*"))
    assert check.claim() and check.claimed
    assert not check.claim()  # one claim per start
    [path] = tmp_path.glob("claim-*.json")
    assert json.loads(path.read_text())["cluster"] == "mwnotebook run"
    with pytest.raises(CapExceeded, match=r"2 \+ 2 > 3"):
        class_caps.CapsCheck(caps, spec, directory=tmp_path).check()
    check.release()
    assert not check.claimed and not path.exists()
    assert not class_caps.CapsCheck(None, spec, directory=tmp_path).claim()  # no caps: nothing read
    assert not list(tmp_path.glob("claim-*"))
