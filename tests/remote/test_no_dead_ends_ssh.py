"""No dead ends over SSH (tests/integration/test_no_dead_ends.py is the local version; both use the
checks of tests/_shared/dead_ends.py): a worker host that drops off the network mid-cell and stays away longer than
fresh workers can wait for it.

* ``--max-restarts 1``: the restart tries to start fresh workers for ``host_wait`` (60 s:
  mwnotebook/engine/cell/restarts.py), then the cell ends with :class:`RestartFailedError` naming
  the host. Between the cells nothing runs and the status says so; no kernel is left on the host
  that stayed reachable; once the host is back the next cell starts fresh workers by itself.
* ``%%mwtrain`` without ``--max-restarts``: the lost worker's cell fails, the background restart
  fails while the host is away (leaving nothing on the other host), ``%mwcluster status`` says
  stopped, and the next ``%%mwtrain`` cell starts fresh workers on both hosts by itself.

Nothing is left running on the hosts after each test (the ``ssh_home`` fixture checks). Plain
cells, no TensorFlow training: what is tested is the cluster's life, not the model's.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from mwnotebook import Cluster
from mwnotebook.errors import RestartFailedError, WorkerDiedError
from mwnotebook.frontend.notebook.magics import MWMagics
from mwnotebook.shared.events import Event, WorkerOutput
from testbed import netns_hosts
from tests._shared.dead_ends import assert_nothing_runs, assert_runs_afresh

pytestmark = [pytest.mark.remote, pytest.mark.slow, pytest.mark.timeout(600)]

LOOP = "import time\nprint('looping', flush=True)\nfor _ in range(3000):\n    time.sleep(0.1)\n"


def set_link(host: netns_hosts.TestHost, state: str) -> None:
    subprocess.run(["ip", "-n", host.netns, "link", "set", "eth0", state], check=True, timeout=20)


def kernels_on(host: netns_hosts.TestHost, pids: set[int | None]) -> set[int]:
    """Which of ``pids`` (the first cluster's kernels) still run on ``host``."""
    return {p for p in pids if p is not None and netns_hosts.running(p)} & netns_hosts.ns_pids(host.netns)


def started_since(host: netns_hosts.TestHost, before: set[int]) -> list[str]:
    """What runs on ``host`` now that did not when the cluster had started: the fresh workers a
    failed restart started there, if any was left behind."""
    return netns_hosts.describe_pids({p for p in host.leftover_pids() - before if netns_hosts.running(p)})


def test_a_host_away_longer_than_the_restart_waits_then_the_next_run_starts_afresh(
        ssh_home: netns_hosts.TestNet) -> None:
    h0, h1 = ssh_home.hosts
    cut: list[float] = []

    def cut_host_1_once_looping(event: Event) -> None:
        if (isinstance(event, WorkerOutput) and event.worker == 1 and not cut
                and "looping" in event.content.get("text", "")):
            set_link(h1, "down")
            cut.append(time.monotonic())

    try:
        with Cluster(hosts=(h0.alias, h1.alias), cpu=True, max_restarts=1) as cluster:
            cluster.start()
            first = {s.pid for s in cluster.status()}
            on_h0 = h0.leftover_pids()  # its worker, and what the launcher keeps per host
            with pytest.raises(RestartFailedError) as info:
                cluster.run(LOOP, on_event=cut_host_1_once_looping, timeout=300)
            gave_up = time.monotonic() - cut[0]
            assert h1.alias in str(info.value), str(info.value)
            assert_nothing_runs(cluster)
            # The fresh worker each try started on the reachable host was ended with the try.
            assert not started_since(h0, on_h0), "left on the reachable host"
            assert not kernels_on(h0, first)
            set_link(h1, "up")
            back = time.monotonic()
            assert_runs_afresh(cluster, first)
            fresh = time.monotonic() - back
            assert {s.host for s in cluster.status()} == {h0.alias, h1.alias}
    finally:
        set_link(h1, "up")
    print(f"\nhost away: RestartFailedError {gave_up:.1f} s after the cut; host back -> fresh cell done {fresh:.1f} s")


def test_after_a_lost_host_the_next_mwtrain_cell_starts_fresh_workers(ssh_home: netns_hosts.TestNet, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Through the magics, without ``--max-restarts``: the failed cell's background restart cannot
    reach the host; the next cell does not end with that, it starts afresh."""
    h0, h1 = ssh_home.hosts
    magics = MWMagics(InteractiveShell.instance())
    line = f"--hosts {h0.alias},{h1.alias} --cpu --no-dashboard"
    flag = tmp_path / "looping"  # the hosts share this machine's files
    cell = ("import os, time\n"
            "if os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n"
            f"    open({str(flag)!r}, 'w').close()\n"
            "for _ in range(3000):\n"
            "    time.sleep(0.1)\n")

    def cut_host_1_once_looping() -> None:
        deadline = time.monotonic() + 120
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        set_link(h1, "down")

    try:
        magics.mwtrain(line, "x = 1")
        cluster = magics.session.cluster
        assert cluster is not None
        first = {s.pid for s in cluster.status()}
        on_h0 = h0.leftover_pids()
        cutter = threading.Thread(target=cut_host_1_once_looping, daemon=True)
        cutter.start()
        with pytest.raises(WorkerDiedError) as info:
            magics.mwtrain(line, cell)
        cutter.join()
        assert info.value.worker == 1 and info.value.restarted, str(info.value)
        # The background restart cannot reach host 1: it ends, and the status says nothing runs.
        deadline = time.monotonic() + 120
        while [s.state for s in cluster.status()] != ["stopped"] * 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert_nothing_runs(cluster)
        capsys.readouterr()
        magics.mwcluster("status")
        assert "stopped" in capsys.readouterr().out
        assert not kernels_on(h0, first)
        assert not started_since(h0, on_h0), "left on the reachable host"
        set_link(h1, "up")
        magics.mwtrain(line, "print('fresh', 'x' in globals())")
        out = capsys.readouterr().out
        assert "[worker 0] fresh False" in out and "[worker 1] fresh False" in out, out
        assert "TF_CONFIG" in out, out  # the fresh cluster's addresses are shown, as at the first start
        assert all(s.alive and s.state == "done" for s in cluster.status())
        assert not first & {s.pid for s in cluster.status()}
    finally:
        set_link(h1, "up")
        magics.mwcluster("stop")
