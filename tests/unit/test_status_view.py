"""The status a user checks (``Cluster.status()``, ``%mwcluster status``): every task of a cluster,
its role, TF_CONFIG task, address, pid and state (engine/cluster_status.py,
frontend/notebook/views.py). Fakes stand in for the kernels: this is the pure assembly and
rendering; tests/tf/test_ps_roles.py checks it on a real --ps cluster."""

from __future__ import annotations

import asyncio

from mwnotebook.config.roles import RoleLayout, Task
from mwnotebook.engine.cluster_status import WorkerInfo, cluster_status
from mwnotebook.engine.roles.task_servers import NOT_BACK_NOTE, not_back_line
from mwnotebook.frontend.notebook.views import status_bundle
from tests._shared.fakes import ADDRESSES, FakeHandle, FakeKernel, FakeServers


def ps_status() -> list[WorkerInfo]:
    layout = RoleLayout(workers=2, ps=1)
    w0, w1, ps0 = Task("worker", 0), Task("worker", 1), Task("ps", 0)
    servers = FakeServers({w0: FakeKernel(FakeHandle(pid=201)), ps0: FakeKernel(FakeHandle(pid=203))},
                          {w0: "serving", w1: "restarting", ps0: "serving"}, {w0: 1, w1: 0, ps0: 0})
    return asyncio.run(cluster_status(layout, ADDRESSES, ["idle"], [FakeKernel(FakeHandle(pid=100))],
                                      servers))  # type: ignore[arg-type]


def test_a_ps_cluster_reports_every_task_with_its_role_task_and_address():
    infos = ps_status()
    assert [(i.index, i.role, i.task, i.address, i.pid, i.state, i.alive, i.runs_cell) for i in infos] == [
        (0, "coordinator", "chief:0", "localhost:1000", 100, "idle", True, True),
        (1, "worker server", "worker:0", "localhost:1001", 201, "serving", True, False),
        (2, "worker server", "worker:1", "localhost:1002", None, "restarting", False, False),
        (3, "parameter server", "ps:0", "localhost:1003", 203, "serving", True, False),
    ]
    assert infos[1].restarts == 1
    assert infos[3].tf_config["task"] == {"type": "ps", "index": 0}


def test_the_ps_table_has_a_row_per_task_and_the_shared_cluster_once():
    text = status_bundle(ps_status(), [{"cpus": ["c"], "gpus": [], "cuda_visible_devices": "-1"}])["text/plain"]
    lines = text.splitlines()
    assert lines[0] == "mwnotebook cluster: 1 coordinator, 2 worker servers, 1 parameter server"
    assert lines[1].split() == ["role", "task", "address", "host", "pid", "state", "alive", "devices", "(seen",
                                "by", "TF)"]
    rows = [line.split("  ") for line in lines[2:6]]
    assert [r[0] for r in rows] == ["coordinator", "worker server", "worker server", "parameter server"]
    assert "1 CPU, 0 GPU (CUDA_VISIBLE_DEVICES=-1)" in lines[2]
    assert "serving (restarted 1x)" in lines[3] and "restarting" in lines[4] and "ps:0" in lines[5]
    assert lines[6].startswith("TF_CONFIG cluster of every task above;")
    assert lines[6].endswith('{"chief":["localhost:1000"],"worker":["localhost:1001","localhost:1002"],'
                             '"ps":["localhost:1003"]}')


def test_a_worker_server_not_back_says_why_in_its_row():
    """A worker server whose restart failed (its Slurm node failed): state ``lost`` and the note of
    engine/roles/task_servers.py, in the entry and in the table's state column."""
    w0, w1, ps0 = Task("worker", 0), Task("worker", 1), Task("ps", 0)
    servers = FakeServers({w0: FakeKernel(FakeHandle(pid=201)), ps0: FakeKernel(FakeHandle(pid=203))},
                          {w0: "serving", w1: "lost", ps0: "serving"}, {w0: 0, w1: 0, ps0: 0}, {w1: NOT_BACK_NOTE})
    infos = asyncio.run(cluster_status(RoleLayout(workers=2, ps=1), ADDRESSES, ["idle"], [FakeKernel(FakeHandle(pid=100))],
                                       servers))  # type: ignore[arg-type]
    assert [(i.task, i.state, i.note) for i in infos[1:]] == [
        ("worker:0", "serving", ""), ("worker:1", "lost", NOT_BACK_NOTE), ("ps:0", "serving", "")]
    row = status_bundle(infos)["text/plain"].splitlines()[4]
    assert "worker:1" in row and f"lost ({NOT_BACK_NOTE})" in row
    assert not_back_line([w1], ["node n1 lost; worker-1 restarted on node n2"], before_cell=True).startswith(
        "[mwnotebook] worker server worker-1 was not back: the cluster was restarted for this cell "
        "(node n1 lost; worker-1 restarted on node n2)")


def test_a_stopped_ps_cluster_still_lists_its_servers():
    infos = asyncio.run(cluster_status(RoleLayout(workers=1, ps=1), [], ["stopped"], [], None))
    assert [(i.role, i.state, i.pid, i.alive) for i in infos] == [
        ("coordinator", "stopped", None, False), ("worker server", "stopped", None, False),
        ("parameter server", "stopped", None, False)]


def test_the_plain_worker_table_is_unchanged():
    layout = RoleLayout(workers=2)
    infos = asyncio.run(cluster_status(layout, ADDRESSES[:2], ["idle", "busy"],
                                       [FakeKernel(FakeHandle(pid=11)), FakeKernel(FakeHandle(pid=12, alive=False))],
                                       None))  # type: ignore[arg-type]
    lines = [line.rstrip() for line in status_bundle(infos)["text/plain"].splitlines()]
    cluster = '{"cluster":{"worker":["localhost:1000","localhost:1001"]},'
    assert lines == [
        "mwnotebook cluster",
        "worker  host       pid  state  alive  TF_CONFIG",
        '0       localhost  11   idle   yes    ' + cluster + '"task":{"type":"worker","index":0}}',
        '1       localhost  12   busy   no     ' + cluster + '"task":{"type":"worker","index":1}}',
    ]


def test_chief_and_evaluator_clusters_get_the_task_table():
    layout = RoleLayout(workers=2, chief=True, evaluator=True)
    infos = asyncio.run(cluster_status(layout, ADDRESSES[:2], ["idle"] * 3, [], None))
    assert [(i.role, i.task, i.address) for i in infos] == [
        ("chief", "chief:0", "localhost:1000"), ("worker", "worker:0", "localhost:1001"),
        ("evaluator", "evaluator:0", "")]
    text = status_bundle(infos)["text/plain"]
    assert text.splitlines()[0] == "mwnotebook cluster: 1 chief, 1 worker, 1 evaluator"
    assert "but the evaluator (whose TF_CONFIG names only itself)" in text
