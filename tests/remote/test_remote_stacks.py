"""``Cluster.stacks()`` (``%mwcluster stacks``) for remote workers on the SSH test hosts: each worker's
agent signals its kernel on its host and sends back the dump (processes/shipped/remote_agent.py, the
``stacks`` command); the report shows where each remote worker's cell hangs."""

from __future__ import annotations

import threading
import time

import pytest

from mwnotebook import Cluster, ClusterInterrupted
from testbed import netns_hosts
from testbed.netns_hosts import CHECKOUT

#: Hang bounds only, generous for a loaded 2-core machine.
pytestmark = [pytest.mark.remote, pytest.mark.slow, pytest.mark.timeout(400)]

#: Hangs in Python, in a function of the cell: the frame the stacks must show, on every worker.
HUNG = '''import time

def wait_for_ever():
    time.sleep(600)

print("hanging", flush=True)
wait_for_ever()
'''


def shows_the_hang(report: object, hosts: tuple[str, ...]) -> bool:
    workers = report.workers  # type: ignore[attr-defined]
    return [w.host for w in workers] == list(hosts) and all(
        w.main is not None and any("in wait_for_ever: time.sleep(600)" in f for f in w.main.frames)
        for w in workers)


def test_stacks_of_a_cell_hung_on_remote_workers(ssh_home: netns_hosts.TestNet) -> None:
    hosts = tuple(h.alias for h in ssh_home.hosts)
    with Cluster(hosts=hosts, cpu=True, env={"PYTHONPATH": CHECKOUT}) as cluster:
        cluster.start()
        pids = [info.pid for info in cluster.status()]
        errors: list[BaseException] = []

        def run() -> None:
            try:
                cluster.run(HUNG, timeout=300)
            except BaseException as exc:
                errors.append(exc)

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        report = None
        deadline = time.monotonic() + 60  # a hang bound: the cell reaches its sleep within seconds
        while time.monotonic() < deadline and runner.is_alive():
            time.sleep(0.5)
            report = cluster.stacks()
            if shows_the_hang(report, hosts):
                break
        cluster.interrupt()
        runner.join(60)
        assert report is not None and shows_the_hang(report, hosts), report and report.text()
        text = report.text()
        for i, (host, pid) in enumerate(zip(hosts, pids)):  # the pid on the worker's own host
            assert f"--- worker {i} ({host}, pid {pid}) ---" in text
        assert len(errors) == 1 and isinstance(errors[0], ClusterInterrupted), errors
