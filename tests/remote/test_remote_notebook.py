"""Lessons 04 and 09b, executed headless against the two sshd test hosts: lesson 04's all-reduce cell
(the seed program) on both hosts, and lesson 09b's parameter-server cluster of two lab machines: the
tutorial's ``fit`` with ``--ps 1``, each task on the host the placement rule gives it, its loss drawn
in the saved chart, then the parameter server moved with ``--place``."""

from __future__ import annotations

import re
import sys

import pytest

from testbed import netns_hosts
from testbed.lessons import execute_lesson, text_of
from testbed.seed_cell import expected_line

pytestmark = [pytest.mark.remote, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(1200)]


def row(text: str, task: str) -> str:
    """The TF_CONFIG table's row of ``task`` (``parameter server ps:0``) in a cell's text output."""
    rows = [line for line in text.splitlines() if line.startswith(task)]
    assert len(rows) == 1, (task, text[:3000])
    return rows[0]


def check_ps_cell(text: str, hosts: dict[str, netns_hosts.TestHost]) -> None:
    """A section-7 cell: each task on its host in the table, the loss falling over the epochs, and a
    line per worker server (on its host's address) saying how many of the 40 jobs it ran."""
    for task, host in hosts.items():
        assert f" {host.alias} " in row(text, task), (task, host.alias, row(text, task))
    losses = [float(v) for v in re.search(r"loss by epoch: ([\d. ]+)", text).group(1).split()]  # type: ignore[union-attr]
    assert len(losses) == 5 and losses[-1] < losses[0], losses
    ran = {int(i): (address, int(n)) for i, address, n in
           re.findall(r"worker server (\d) at (\S+): (\d+) of 40 jobs", text)}
    assert sorted(ran) == [0, 1], text[-3000:]
    assert sum(n for _, n in ran.values()) == 40 and all(n >= 1 for _, n in ran.values()), ran
    for index in (0, 1):
        assert ran[index][0].startswith(hosts[f"worker server worker:{index}"].address + ":"), ran


def test_remote_hosts_notebook(ssh_home: netns_hosts.TestNet, monkeypatch: pytest.MonkeyPatch) -> None:
    h0, h1 = ssh_home.hosts
    monkeypatch.setenv("MWNOTEBOOK_HOSTS", f"{h0.alias},{h1.alias}")
    monkeypatch.setenv("MWNOTEBOOK_PYTHON", sys.executable)
    nb = execute_lesson("04_remote_hosts", timeout=500)

    code = [c for c in nb.cells if c.cell_type == "code"]
    (train,) = [c for c in code if c.source.startswith("%%mwtrain")]
    lines = text_of(train).splitlines()
    for i in range(2):
        assert f"[worker {i}] {expected_line(i)}" in lines, text_of(train)[-3000:]
    status = text_of(next(c for c in code if c.source.strip() == "%mwcluster status"))
    assert h0.address in status and h1.address in status
    # ssh_home checks that %mwcluster stop left nothing running on either host.


def test_parameter_servers_on_lab_machines_notebook(ssh_home: netns_hosts.TestNet,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    h0, h1 = ssh_home.hosts
    monkeypatch.setenv("MWNOTEBOOK_HOSTS", f"{h0.alias},{h1.alias}")
    monkeypatch.setenv("MWNOTEBOOK_PYTHON", sys.executable)
    nb = execute_lesson("09b_parameter_servers_on_lab_machines", timeout=500)

    code = [c for c in nb.cells if c.cell_type == "code"]
    # The default placement, then the ps moved to the first machine with --place.
    default, placed = [c for c in code if c.source.startswith("%%mwtrain") and "--ps 1" in c.source]
    assert "--place ps=$FIRST_HOST" in placed.source
    tasks = {"coordinator chief:0": h0, "worker server worker:0": h0, "worker server worker:1": h1}
    check_ps_cell(text_of(default), {**tasks, "parameter server ps:0": h1})
    check_ps_cell(text_of(placed), {**tasks, "parameter server ps:0": h0})
    for cell in (default, placed):  # the coordinator's fit reports epochs: its loss is in the saved chart
        pictures = [o["data"]["image/svg+xml"] for o in cell.outputs if "image/svg+xml" in o.get("data", {})]
        assert pictures and "<polyline" in pictures[-1], [o.get("data", {}).keys() for o in cell.outputs]
    # ssh_home checks that %mwcluster stop left nothing running on either host.
