"""The pure parts of ``--coordinator notebook`` (engine/roles/notebook_coordinator.py): which option
combinations are refused before anything starts, when a second cluster is refused, what the
status and the failures call the coordinator, and the devices column of a --ps cluster's servers.
The real flow (a notebook kernel training as coordinator) is tests/tf/test_notebook_coordinator.py."""

from __future__ import annotations

import asyncio
import os
import re

import pytest

from mwnotebook.config.roles import RoleLayout, Task
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.engine.cluster_status import cluster_status
from mwnotebook.engine.roles import notebook_coordinator
from mwnotebook.errors import ConfigError, WorkerFailure, render_attempts
from mwnotebook.frontend.notebook.magics import _parse_mwtrain_line, mwcluster_parser
from mwnotebook.frontend.notebook.views import status_bundle
from mwnotebook.processes.runtime import ps_guard
from tests._shared.fakes import ADDRESSES, FakeHandle, FakeKernel, FakeServers


def test_the_opt_in_is_a_mwcluster_start_option_and_puts_the_servers_on_the_host_network():
    ns = mwcluster_parser().parse_args(["start", "--ps", "1", "--workers", "2", "--coordinator", "notebook"])
    from mwnotebook.config.options import spec_from_options

    spec = spec_from_options(ns)
    assert (spec.coordinator, spec.network, spec.force) == ("notebook", "host", False)
    assert ClusterSpec(ps=1, coordinator="notebook", force=True) == ClusterSpec(ps=1, coordinator="notebook")
    assert ClusterSpec(ps=1, coordinator="notebook") != ClusterSpec(ps=1)  # a different cluster


def test_mwtrain_has_no_coordinator_option():  # a cell magic cannot hand the cell to the notebook itself
    with pytest.raises(Exception, match="unrecognized arguments: --coordinator"):
        _parse_mwtrain_line("--ps 1 --coordinator notebook")


@pytest.mark.parametrize(("fields", "message"), [
    (dict(workers=2, coordinator="notebook"), "--coordinator notebook needs --ps P"),
    (dict(ps=1, coordinator="notebook", hosts=("a", "b")), "starts local servers only: remove --hosts/--slurm"),
    (dict(ps=1, coordinator="notebook", slurm=""), "starts local servers only"),
    (dict(ps=1, coordinator="notebook", network="private"), "cannot use --network private"),
    (dict(ps=1, coordinator="notebook", evaluator=True), "no cell runs on the cluster"),
    (dict(ps=1, force=True), "--force only applies with --coordinator notebook"),
    (dict(ps=1, coordinator="cell"), "--coordinator must be 'kernel' or 'notebook'"),
])
def test_bad_combinations_are_config_errors_naming_the_option(fields, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        ClusterSpec(**fields)


def test_a_second_cluster_is_refused_once_this_process_made_a_strategy_unless_forced(monkeypatch):
    monkeypatch.setattr(ps_guard, "_made", 0)
    assert notebook_coordinator.refusal(force=False) is None  # never connected: nothing is left behind
    monkeypatch.setattr(ps_guard, "_made", 1)
    refused = notebook_coordinator.refusal(force=False)
    assert isinstance(refused, ConfigError)
    assert "only once" in str(refused) and "crashed the whole process" in str(refused) and "--force" in str(refused)
    assert notebook_coordinator.refusal(force=True) is None
    assert "cannot be stopped" in notebook_coordinator.stop_note()
    monkeypatch.setattr(ps_guard, "_made", 0)
    assert "cannot be stopped" not in notebook_coordinator.stop_note()


def test_join_hands_this_process_the_chiefs_variables_and_leave_takes_them_back(monkeypatch):
    monkeypatch.setattr(ps_guard, "install", lambda: None)  # no import hooks in the test process
    monkeypatch.setattr(notebook_coordinator, "patch_when_imported", lambda *_: None)
    monkeypatch.setattr(ps_guard, "_made", 0)
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("GRPC_FAIL_FAST", "false")
    notebook_coordinator.join('{"task":{"type":"chief","index":0}}', "127.0.0.1:1", legacy_keras=True)
    try:
        assert os.environ["TF_CONFIG"] == '{"task":{"type":"chief","index":0}}'
        assert os.environ["GRPC_FAIL_FAST"] == "use_caller"
    finally:
        notebook_coordinator.leave()
    assert "TF_CONFIG" not in os.environ and os.environ["GRPC_FAIL_FAST"] == "false"


def test_the_notice_names_every_listening_address_and_what_cannot_be_stopped():
    text = notebook_coordinator.start_notice("127.0.0.1:1000", ["worker-0 127.0.0.1:1001", "ps-0 127.0.0.1:1003"])
    assert "WITHOUT authentication on all interfaces" in text
    assert "worker-0 127.0.0.1:1001, ps-0 127.0.0.1:1003" in text and "its own gRPC server on port 1000" in text
    assert "cannot stop it" in text


def test_the_status_shows_the_notebook_as_coordinator_and_every_servers_devices():
    layout = RoleLayout(workers=2, ps=1)
    w0, w1, ps0 = Task("worker", 0), Task("worker", 1), Task("ps", 0)
    servers = FakeServers({w0: FakeKernel(FakeHandle(pid=201)), w1: FakeKernel(FakeHandle(pid=202)),
                           ps0: FakeKernel(FakeHandle(pid=203))},
                          {w0: "serving", w1: "serving", ps0: "serving"}, {w0: 0, w1: 0, ps0: 0})
    infos = asyncio.run(cluster_status(layout, ADDRESSES, ["notebook"], [], servers,  # type: ignore[arg-type]
                                       coordinator_here=True))
    assert [(i.role, i.task, i.pid, i.state, i.runs_cell) for i in infos][0] == \
        ("coordinator (notebook)", "chief:0", os.getpid(), "notebook", False)
    cpu = {"cpus": ["c"], "gpus": [], "cuda_visible_devices": "-1"}
    text = status_bundle(infos, [None, cpu, cpu, cpu])["text/plain"]
    assert text.count("1 CPU, 0 GPU (CUDA_VISIBLE_DEVICES=-1)") == 3, text
    coordinator_row = text.splitlines()[2]
    assert coordinator_row.startswith("coordinator (notebook)") and "unknown" not in coordinator_row


def test_a_named_kernel_is_called_by_its_name_in_failures_and_the_attempt_list():
    lost = WorkerFailure(0, "died", exit_description="killed by SIGKILL", name="coordinator")
    assert lost.headline() == "coordinator died (killed by SIGKILL)"
    assert WorkerFailure(1, "died").headline() == "worker 1 died (exited)"
    from mwnotebook.errors import AttemptFailure

    lines = render_attempts([AttemptFailure(1, lost.headline(), (lost,), 2.0)], lost.headline())
    assert all("worker 0" not in line for line in lines) and "coordinator died" in lines[1], lines


def test_a_notebook_coordinator_cluster_runs_no_cell_and_has_no_restart():
    from mwnotebook.engine.async_cluster import AsyncCluster
    from mwnotebook.errors import ClusterStateError

    cluster = AsyncCluster(workers=2, ps=1, coordinator="notebook")
    with pytest.raises(ClusterStateError, match=re.escape("mw.ps_strategy()")):
        asyncio.run(cluster.run("print(1)"))
    with pytest.raises(ClusterStateError, match="cannot be restarted"):
        asyncio.run(cluster.restart())
    assert not cluster.started and cluster.notebook_notice == ""
