"""``%%mwtrain``'s first announcement of a cluster (frontend/notebook/magics.py ``announce``)
takes the addresses and the workers' hosts from the cluster, and where the workers run from the spec."""

from __future__ import annotations

from typing import Any

import pytest

from mwnotebook import ClusterSpec
from mwnotebook.frontend.notebook import magics


class _Handle:
    def __init__(self, host: str) -> None:
        self.host = host


class _Worker:
    def __init__(self, host: str) -> None:
        self.handle = _Handle(host)


class _Cluster:
    network_isolated = False

    def __init__(self, spec: ClusterSpec, addresses: list[str]) -> None:
        self.spec = spec
        self.addresses = addresses
        self.tf_configs = [{"cluster": {"worker": addresses}, "task": {"type": "worker", "index": i}}
                           for i in range(len(addresses))]

    @property
    def workers(self) -> tuple[_Worker, ...]:
        return tuple(_Worker(a.rpartition(":")[0]) for a in self.addresses)

    def status(self) -> list[Any]:
        raise AssertionError("announce asks the workers nothing: the cluster already knows their hosts")


@pytest.mark.parametrize("spec, where", [(ClusterSpec(workers=2), "this machine"),
                                         (ClusterSpec(hosts=("a", "b")), "the worker hosts"),
                                         (ClusterSpec(slurm="", workers=2), "the worker hosts"),
                                         (ClusterSpec(ray="auto", workers=2), "the worker hosts")],
                         ids=["local", "ssh", "slurm", "ray"])
def test_the_notice_names_the_ports_and_where_they_are(spec: ClusterSpec, where: str, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    shown: list[Any] = []
    monkeypatch.setattr(magics, "publish_display_data", shown.append)
    session = magics.NotebookSession()
    session.announce(_Cluster(spec, ["n1:2222", "n2:3333"]))  # type: ignore[arg-type]
    notice = capsys.readouterr().err
    assert "2222, 3333" in notice and where in notice, notice
    assert len(shown) == 1
    table = shown[0]["text/plain"]
    assert "n1" in table and "n2" in table, table


def test_a_role_cluster_is_announced_task_by_task_with_each_host(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A --ps cluster on --hosts: the coordinator and every server, each with the host the
    placement gave it (config/task_placement.py), so the user sees where each task runs."""
    spec = ClusterSpec(hosts=("a", "b"), ps=1)
    addresses = ["a:1", "a:2", "b:3", "b:4"]
    cluster = _Cluster(spec, addresses)
    cluster.tf_configs = [spec.layout.tf_config(addresses, spec.layout.cell_tasks()[0])]
    cluster.server_hosts = {"worker-0": "a", "worker-1": "b", "ps-0": "b"}  # type: ignore[attr-defined]
    monkeypatch.setattr(_Cluster, "workers", property(lambda self: (_Worker("a"),)))
    shown: list[Any] = []
    monkeypatch.setattr(magics, "publish_display_data", shown.append)
    magics.NotebookSession().announce(cluster)  # type: ignore[arg-type]
    lines = shown[0]["text/plain"].splitlines()
    assert lines[0] == "4 TensorFlow tasks", lines
    rows = [line.split()[:-1] for line in lines[2:]]
    assert rows == [["coordinator", "chief:0", "a"], ["worker", "server", "worker:0", "a"],
                    ["worker", "server", "worker:1", "b"], ["parameter", "server", "ps:0", "b"]], lines
    assert '"task":{"type":"ps","index":0}' in lines[-1]
