"""``--max-restarts`` over SSH: a worker host's link is downed for 5 s in the middle of a tf_keras
``fit`` with ``BackupAndRestore`` (tests/reliability/chaos.py), on the network-namespace test hosts.
The cell completes with the final metrics of the same cell run undisturbed -- whether the outage
cost a restart (the SSH keepalive gave up on the host) or the connections rode it out (what 5 s
did here: 0 restarts) -- and
nothing is left running on the hosts (the ``ssh_home`` fixture checks). The link goes down when worker
0's live curve (the metric records of its Keras reporter) has passed epoch 2, and every worker's curve
must cover every epoch: a stock ``fit`` on SSH workers sends its records like a local one."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mwnotebook import Cluster
from mwnotebook.shared.events import Event, RunRestarted, WorkerMetrics
from tests._shared import netns_hosts

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests._shared.modules import require
from tests.reliability.chaos import final_line, fit_cell

pytestmark = [pytest.mark.remote, pytest.mark.slow, pytest.mark.tf, pytest.mark.timeout(900)]

#: ``MW_OUTAGE_SECONDS=25`` makes the outage long enough for the SSH keepalive to give up on the host
#: (tests/remote/test_dead_network.py: within 15 s), so the restart path over SSH runs too.
OUTAGE_SECONDS = float(os.environ.get("MW_OUTAGE_SECONDS") or 5.0)


def set_link(host: netns_hosts.TestHost, state: str) -> None:
    subprocess.run(["ip", "-n", host.netns, "link", "set", "eth0", state], check=True, timeout=20)


def test_a_host_offline_for_5_s_mid_fit_does_not_change_the_result(ssh_home: netns_hosts.TestNet, tmp_path) -> None:
    require("tensorflow", "pip install -e '.[tensorflow-cpu,test]'")
    h0, h1 = ssh_home.hosts
    cut: list[float] = []
    restarts: list[RunRestarted] = []

    def outage_in_epoch_3(event: Event) -> None:
        if isinstance(event, RunRestarted):
            restarts.append(event)
        # Worker 0's live curve has passed the end of epoch 2 (its Keras reporter's epoch record).
        if (isinstance(event, WorkerMetrics) and not cut and event.worker == 0
                and any(r.get("kind") == "epoch" and r.get("epoch") == 1 for r in event.records)):
            set_link(h1, "down")
            cut.append(time.monotonic())
            threading.Timer(OUTAGE_SECONDS, set_link, args=(h1, "up")).start()

    try:
        with Cluster(hosts=(h0.alias, h1.alias), cpu=True) as cluster:
            reference = cluster.run(fit_cell(str(tmp_path / "reference")), timeout=600)
            result = cluster.run(fit_cell(str(tmp_path / "outage")), on_event=outage_in_epoch_3, timeout=600,
                                 max_restarts=3)
    finally:
        time.sleep(OUTAGE_SECONDS)
        set_link(h1, "up")
    assert cut, "the link was never downed"
    expected = [final_line(reference.stdout(i)) for i in range(2)]
    assert all(expected)
    assert [final_line(result.stdout(i)) for i in range(2)] == expected
    assert len(result.restarts) == len(restarts) <= 3
    for worker in range(2):  # each worker's fit sent its live curve, the outage's attempt included
        epochs = {r["epoch"] for r in result.metrics if r.get("worker") == worker and r.get("kind") == "epoch"}
        assert epochs == set(range(8)), (worker, sorted(epochs))
    print(f"\nhost offline {OUTAGE_SECONDS:g} s mid-fit: {len(restarts)} restarts "
          f"{[r.summary() for r in restarts]}")
