"""``--max-restarts`` over SSH: a worker host's link is downed in the middle of a tf_keras ``fit``
with ``BackupAndRestore`` (testbed/chaos.py), on the network-namespace test hosts.

* **5 s**: the connections ride it out (0 restarts here) or the keepalive gives up (a restart);
  either way the cell completes with the final metrics of the same cell run undisturbed.
* **25 s**: longer than the SSH keepalive waits for a silent host (KEEPALIVE_SECONDS, 8 s:
  mwnotebook/launchers/remote/kernel_start.py), so the worker on that host is really lost: the
  cell is restarted (at least one ``RunRestarted``, the first one naming the keepalive), its fresh
  workers wait for the host to come back (mwnotebook/engine/cell/restarts.py ``host_wait``), and
  ``fit`` resumes from its backup to the same final metrics as the undisturbed run.

The undisturbed run is made once per module (the ``reference`` fixture). The link goes down when
worker 0's live curve (the metric records of its Keras reporter) has passed epoch 2, and every
worker's curve must cover every epoch (a stock ``fit`` on SSH workers sends its records like a
local one), except, for a lost worker, the record it had not sent yet when its link went down. Nothing is left running on the hosts after each test (the ``ssh_home`` fixture checks).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mwnotebook import Cluster
from mwnotebook.engine.cell.result import RunResult
from mwnotebook.launchers.remote.kernel_start import KEEPALIVE_SECONDS
from mwnotebook.shared.events import Event, RunRestarted, WorkerMetrics
from testbed import netns_hosts

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from testbed.chaos import final_line, fit_cell
from testbed.modules import require

pytestmark = [pytest.mark.remote, pytest.mark.slow, pytest.mark.tf, pytest.mark.timeout(900)]

#: Long enough that the keepalive gives up on the host well before it comes back.
LOST_OUTAGE_SECONDS = 25.0
assert LOST_OUTAGE_SECONDS > 2 * KEEPALIVE_SECONDS


def set_link(host: netns_hosts.TestHost, state: str) -> None:
    subprocess.run(["ip", "-n", host.netns, "link", "set", "eth0", state], check=True, timeout=20)


@pytest.fixture(scope="module")
def reference(test_net: netns_hosts.TestNet, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Each worker's final line of the fit cell run undisturbed on the two hosts (once per module)."""
    require("tensorflow", "pip install -e '.[tensorflow-cpu,test]'")
    h0, h1 = test_net.hosts
    with pytest.MonkeyPatch.context() as patch:  # what the ssh_home fixture does, for this module's run
        patch.setenv("HOME", str(test_net.home))
        patch.setenv("MWNOTEBOOK_SSH_CONFIG", str(test_net.ssh_config))
        patch.delenv("SSH_AUTH_SOCK", raising=False)
        with Cluster(hosts=(h0.alias, h1.alias), cpu=True) as cluster:
            result = cluster.run(fit_cell(str(tmp_path_factory.mktemp("reference"))), timeout=600)
    lines = [final_line(result.stdout(i)) for i in range(2)]
    assert all(lines), [result.stdout(i)[-500:] for i in range(2)]
    left = test_net.wait_no_leftovers(10)
    assert not left, f"processes left running on the test hosts: {left}"
    return lines


@dataclass
class Outage:
    """Downs ``host``'s link for ``seconds`` once worker 0 has passed epoch 2; records the restarts."""

    host: netns_hosts.TestHost
    seconds: float
    cut: list[float] = field(default_factory=list)
    restored: list[float] = field(default_factory=list)
    restarts: list[RunRestarted] = field(default_factory=list)
    timers: list[threading.Timer] = field(default_factory=list)

    def on_event(self, event: Event) -> None:
        if isinstance(event, RunRestarted):
            self.restarts.append(event)
        # Worker 0's live curve has passed the end of epoch 2 (its Keras reporter's epoch record).
        if (isinstance(event, WorkerMetrics) and not self.cut and event.worker == 0
                and any(r.get("kind") == "epoch" and r.get("epoch") == 1 for r in event.records)):
            set_link(self.host, "down")
            self.cut.append(time.monotonic())
            timer = threading.Timer(self.seconds, self.link_up)
            self.timers.append(timer)
            timer.start()

    def link_up(self) -> None:
        if not self.restored:
            set_link(self.host, "up")
            self.restored.append(time.monotonic())

    def end(self) -> None:
        for timer in self.timers:
            timer.cancel()
        self.link_up()


OutageRun = Callable[[float], "tuple[RunResult, Outage, float]"]


@pytest.fixture
def outage_run(ssh_home: netns_hosts.TestNet, tmp_path: Path) -> Iterator[OutageRun]:
    """``run(seconds)``: the fit cell on the two hosts with host 1 offline for ``seconds`` mid-fit,
    under ``--max-restarts 3``; the result, the :class:`Outage` and the seconds from the cut to
    the cell's end. The link is up again whatever happens."""
    h0, h1 = ssh_home.hosts
    outages: list[Outage] = []

    def run(seconds: float) -> tuple[RunResult, Outage, float]:
        outage = Outage(h1, seconds)
        outages.append(outage)
        try:
            with Cluster(hosts=(h0.alias, h1.alias), cpu=True) as cluster:
                result = cluster.run(fit_cell(str(tmp_path / "outage")), on_event=outage.on_event, timeout=600,
                                     max_restarts=3)
                ended = time.monotonic()
        finally:
            outage.end()
        assert outage.cut, "the link was never downed"
        return result, outage, ended - outage.cut[0]

    try:
        yield run
    finally:
        for outage in outages:
            outage.end()


def check_result(result: RunResult, outage: Outage, reference: list[str]) -> None:
    """The final lines are the undisturbed run's, and each worker's live curve covers every epoch,
    the outage's attempt included. A worker that was lost may miss the one epoch record it had
    not yet sent when its link went down (the restart's ``epoch``: the last one reported before
    the loss): that record went with the SSH connection, and the resumed ``fit`` starts after it."""
    assert [final_line(result.stdout(i)) for i in range(2)] == reference
    assert len(result.restarts) == len(outage.restarts) <= 3
    for worker in range(2):
        epochs = {r["epoch"] for r in result.metrics if r.get("worker") == worker and r.get("kind") == "epoch"}
        in_flight = {r.epoch for r in outage.restarts if r.worker == worker}
        assert set(range(8)) - in_flight <= epochs <= set(range(8)), (worker, sorted(epochs), in_flight)


def test_a_host_offline_for_5_s_mid_fit_does_not_change_the_result(outage_run: OutageRun,
                                                                   reference: list[str]) -> None:
    result, outage, took = outage_run(5.0)
    check_result(result, outage, reference)
    print(f"\nhost offline 5 s mid-fit: {len(outage.restarts)} restarts "
          f"{[r.summary() for r in outage.restarts]}; cut -> cell done {took:.1f} s")


def test_a_host_offline_long_enough_to_lose_its_worker_restarts_to_the_same_result(
        outage_run: OutageRun, reference: list[str]) -> None:
    result, outage, took = outage_run(LOST_OUTAGE_SECONDS)
    assert outage.restarts, "the worker on the offline host was never lost: no restart"
    first = outage.restarts[0]
    assert first.worker == 1 and "SSH keepalive" in first.cause, first.summary()
    check_result(result, outage, reference)
    # The fresh workers started once the host was back (they waited for it), not before.
    back = time.time() - (time.monotonic() - outage.restored[0])  # the link-up, on the wall clock
    assert first.lost_at + first.restart_seconds > back - 1, (first.lost_at, first.restart_seconds, back)
    print(f"\nhost offline {LOST_OUTAGE_SECONDS:g} s mid-fit: {len(outage.restarts)} restarts "
          f"{[r.summary() for r in outage.restarts]}; cut -> cell done {took:.1f} s "
          f"(host back -> cell done {took - LOST_OUTAGE_SECONDS:.1f} s)")
