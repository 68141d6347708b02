"""Remote workers forked from their host's worker template (launchers/remote/template_pool.py,
processes/shipped/remote_template.py) on two real sshd test hosts: one cluster shared by the tests of
this module, in order (the last one kills a template)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mwnotebook import Cluster, ClusterSpec, WorkerDiedError
from mwnotebook.launchers.ssh.launcher import SSHLauncher
from testbed import netns_hosts
from testbed.seed_cell import SEED_CELL, expected_line

pytestmark = [pytest.mark.remote, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(400)]


def template_status(socket_path: str) -> dict:
    """Ask a template what it has loaded, on the socket its workers' agents use."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as channel:
        channel.settimeout(10)
        channel.connect(socket_path)
        channel.sendall(b'{"op": "status"}\n')
        data = b""
        while not data.endswith(b"\n"):
            data += channel.recv(4096)
    return json.loads(data)


@pytest.fixture(scope="module")
def cluster(test_net: netns_hosts.TestNet) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(test_net.home))
        patch.setenv("MWNOTEBOOK_SSH_CONFIG", str(test_net.ssh_config))
        patch.delenv("SSH_AUTH_SOCK", raising=False)
        patch.delenv("MWNOTEBOOK_TEMPLATE", raising=False)
        with Cluster(hosts=tuple(h.alias for h in test_net.hosts), cpu=True) as started:
            started.start()
            yield started
        left = test_net.wait_no_leftovers(15)
        assert not left, f"processes left running on the test hosts: {left}"


def templates_by_host(cluster: Cluster) -> dict[str, object]:
    return {t.place: t for t in cluster.launcher.templates}


def test_workers_are_forked_from_their_hosts_template(cluster: Cluster, test_net: netns_hosts.TestNet) -> None:
    templates = templates_by_host(cluster)
    assert sorted(templates) == sorted(h.alias for h in test_net.hosts)
    for info, host in zip(cluster.status(), test_net.hosts):
        template = templates[host.alias]
        assert template.pid in netns_hosts.ns_pids(host.netns)
        assert netns_hosts.parent_pid(info.pid) == template.pid  # forked by its own host's template
    # TensorFlow is in memory before the first cell imports it.
    first = cluster.run("import os, sys\nprint('tensorflow' in sys.modules, os.getppid())")
    assert [first.stdout(i).split() for i in range(2)] == [
        ["True", str(templates[h.alias].pid)] for h in test_net.hosts]
    result = cluster.run(SEED_CELL, timeout=300)
    for i in range(2):
        assert result.stdout(i) == expected_line(i) + "\n", result.stdout(i)[-2000:]


def test_forked_kernels_start_with_the_templates_objects_frozen(cluster: Cluster) -> None:
    """The template froze what it loaded (``gc.freeze``), so its TensorFlow objects stay shared with
    its kernels instead of being copied by their first full collection (remote_template.py)."""
    result = cluster.run("import gc\nprint(gc.get_freeze_count(), flush=True)")
    frozen = [int(result.stdout(i)) for i in range(2)]
    assert all(count > 100_000 for count in frozen), frozen  # inherited (less what they freed since)
    for template in templates_by_host(cluster).values():
        status = template_status(template.socket)
        assert status["frozen_objects"] > 100_000, status  # TensorFlow + tf_keras + ipykernel


def test_templates_never_create_a_tensorflow_context(cluster: Cluster) -> None:
    """Their workers listed devices and trained; the templates still have no eager context."""
    cluster.run("import tensorflow as tf\nprint(len(tf.config.list_physical_devices()))")
    for template in templates_by_host(cluster).values():
        status = template_status(template.socket)
        assert status["pid"] == template.pid
        assert status["tensorflow_imported"] is True
        assert status["tf_keras_imported"] is True  # the workers' TF_USE_LEGACY_KERAS=1 (the default)
        assert status["context_created"] is False


def test_a_restart_after_a_killed_worker_forks(cluster: Cluster, test_net: netns_hosts.TestNet) -> None:
    templates = templates_by_host(cluster)
    old = [info.pid for info in cluster.status()]
    with pytest.raises(WorkerDiedError) as info:
        cluster.run("import os, signal, time\nif os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n"
                    "    os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(60)", timeout=120)
    assert info.value.worker == 1
    assert "SIGKILL" in info.value.failures[0].exit_description  # the template's word, via the agent
    result = cluster.run("import os\nprint(os.getppid())")
    new = [s.pid for s in cluster.status()]
    assert set(new).isdisjoint(old)
    assert [int(result.stdout(i)) for i in range(2)] == [templates[h.alias].pid for h in test_net.hosts]


def test_a_killed_template_falls_back_to_fresh_workers_with_a_notice(
        cluster: Cluster, test_net: netns_hosts.TestNet, caplog: pytest.LogCaptureFixture) -> None:
    h0, h1 = test_net.hosts
    templates = templates_by_host(cluster)
    running = [s.pid for s in cluster.status()]
    with caplog.at_level(logging.WARNING, logger="mwnotebook.launchers.remote.template_pool"):
        os.kill(templates[h0.alias].pid, signal.SIGKILL)
        # Its running worker is not affected.
        again = cluster.run("print('still here', flush=True)")
        assert [again.stdout(i) for i in range(2)] == ["still here\n"] * 2
        assert [s.pid for s in cluster.status()] == running
        deadline = time.monotonic() + 15
        while not any(h0.alias in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.1)
    notices = [r.getMessage() for r in caplog.records if "no worker template" in r.getMessage()]
    assert len(notices) == 1 and h0.alias in notices[0], notices
    cluster.restart()
    fresh, forked = cluster.status()
    # A fresh interpreter: mwnotebook's worker kernel (the hosts can import mwnotebook; see
    # remote_agent.py has_worker_kernel), where a forked kernel runs the template's command line.
    assert "mwnotebook.processes.worker_kernel" in Path(f"/proc/{fresh.pid}/cmdline").read_text()
    assert int(cluster.run("import gc\nprint(gc.get_freeze_count())").stdout(0)) == 0  # nothing frozen there
    assert netns_hosts.parent_pid(forked.pid) == templates[h1.alias].pid
    result = cluster.run(SEED_CELL, timeout=300)
    for i in range(2):
        assert expected_line(i) in result.stdout(i).splitlines(), result.stdout(i)[-2000:]


def test_no_template_turns_remote_templates_off(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ClusterSpec(hosts=("a", "b"), cpu=True, template=False)
    assert SSHLauncher.from_spec(spec).use_template is False
    assert SSHLauncher.from_spec(ClusterSpec(hosts=("a", "b"), cpu=True)).use_template is True
    monkeypatch.setenv("MWNOTEBOOK_TEMPLATE", "0")
    assert SSHLauncher.from_spec(ClusterSpec(hosts=("a", "b"), cpu=True)).use_template is False
