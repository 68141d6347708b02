"""A remote host whose network silently dies mid-cell (its interface is downed inside its
namespace: no RST, no FIN, every packet lost). The cell must fail naming the host (SSH keepalive
on the notebook side), the remote agent must kill the kernel by itself while the network is still
down (the launcher's pings stop), and the group must come back when the host does.

``MWNOTEBOOK_DEAD_NETWORK_RUNS=5`` repeats the scenario and prints the detection times.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time

import pytest

from mwnotebook import Cluster, WorkerDiedError
from mwnotebook.shared.events import Event, WorkerOutput
from testbed import netns_hosts
from testbed.processes import wait_gone

pytestmark = [pytest.mark.remote, pytest.mark.slow, pytest.mark.timeout(600)]

LOOP = "import time\nprint('looping', flush=True)\nfor _ in range(3000):\n    time.sleep(0.1)\n"


def set_link(host: netns_hosts.TestHost, state: str) -> None:
    subprocess.run(["ip", "-n", host.netns, "link", "set", "eth0", state], check=True, timeout=20)


def test_dead_network_fails_the_cell_and_the_group_comes_back(ssh_home: netns_hosts.TestNet) -> None:
    h0, h1 = ssh_home.hosts
    runs = int(os.environ.get("MWNOTEBOOK_DEAD_NETWORK_RUNS", "1"))
    detected: list[float] = []
    agent_kill: list[float] = []
    try:
        with Cluster(hosts=(h0.alias, h1.alias), cpu=True) as cluster:
            cluster.start()
            for _ in range(runs):
                old = [s.pid for s in cluster.status()]
                assert old[1] in netns_hosts.ns_pids(h1.netns)
                cut: list[float] = []

                def cut_network_once_looping(event: Event) -> None:
                    if (isinstance(event, WorkerOutput) and event.worker == 1 and not cut
                            and "looping" in event.content.get("text", "")):
                        set_link(h1, "down")
                        cut.append(time.monotonic())

                with pytest.raises(WorkerDiedError) as info:
                    cluster.run(LOOP, on_event=cut_network_once_looping, timeout=120)
                assert cut, "worker 1 never started its loop"
                detected.append(time.monotonic() - cut[0])
                error = info.value
                assert error.worker == 1 and error.restarted
                assert f"lost the SSH connection to {h1.alias}" in str(error), str(error)
                assert "SSH keepalive" in str(error), str(error)
                assert detected[-1] < 15, f"the dead network was reported after {detected[-1]:.1f} s"

                # The network is still down: the agent on h1 must end the kernel by itself.
                assert wait_gone(old[1], 30), "the kernel on the cut-off host outlived its connection"
                agent_kill.append(time.monotonic() - cut[0])
                assert wait_gone(old[0], 10)

                set_link(h1, "up")
                cluster.start()  # waits for the background restart, which waited for h1
                status = cluster.status()
                assert all(s.alive for s in status)
                assert [s.pid for s in status] != old
                assert status[1].pid in netns_hosts.ns_pids(h1.netns)
                back = cluster.run("print('back', flush=True)", timeout=60)
                assert [back.stdout(i).strip() for i in range(2)] == ["back", "back"]
    finally:
        set_link(h1, "up")
    print(f"\ndead network, {runs} runs: cell failed after "
          f"{', '.join(f'{t:.1f}' for t in detected)} s (median {statistics.median(detected):.1f}); "
          f"remote kernel ended by its agent after {', '.join(f'{t:.1f}' for t in agent_kill)} s")
    # ssh_home checks that neither host runs anything but its sshd any more.
