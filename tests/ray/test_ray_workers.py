"""Workers on a real Ray cluster (ray_nodes.py: a head and two worker nodes on 127.0.0.2 and
127.0.0.3): the seed through ``mwnotebook run --ray ray://...`` (Ray Client), the workers on distinct
nodes through ``--ray auto``, the head's ``HOST:PORT`` in the rest, the bad inputs,
a notebook process SIGKILLed, and last a node killed mid-training (the node is started again after).
``ray_env`` checks after each test that no relay actor is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from mwnotebook import Cluster, ClusterRunError, ClusterStartError
from mwnotebook.shared.events import Event, WorkerOutput
from testbed import ray_nodes
from testbed.processes import running
from testbed.seed_cell import LONG_RUN, SEED_CELL, WHERE_LINE, expected_line
from tests._shared.waits import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_seed_through_mwnotebook_run_with_ray_client(ray_env: ray_nodes.RayTestCluster, tmp_path: Path) -> None:
    """The option as a user types it, through Ray Client (``ray://HEAD:PORT``, the head's client
    server): each worker prints the seed's exact line, labelled, each on its own node."""
    script = tmp_path / "seed.py"
    script.write_text(SEED_CELL + WHERE_LINE)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mwnotebook.frontend.cli.command", "run", "--ray", ray_env.client_address,
         "--cpu", "--no-report", str(script)],
        cwd=tmp_path, env={**os.environ, **ray_env.env()}, capture_output=True, text=True, timeout=500)
    print(f"mwnotebook run --ray {ray_env.client_address}: {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stderr[-3000:] + ray_env.log_tail("ray_client_server*")
    lines = done.stdout.splitlines()
    for i in range(2):
        assert f"[worker {i}] {expected_line(i)}" in lines, done.stdout[-3000:]
    nodes = sorted(line.rsplit(" ", 1)[1] for line in lines if line.startswith("[worker ") and "] at " in line)
    assert nodes == ["127.0.0.2", "127.0.0.3"], done.stdout[-3000:]


def test_auto_workers_on_distinct_nodes_and_nothing_left_after_stop(
        ray_env: ray_nodes.RayTestCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--ray auto`` is Ray's own: the cluster RAY_ADDRESS names (other test sessions' clusters may
    run on this machine, so the test names its own)."""
    monkeypatch.setenv("RAY_ADDRESS", ray_env.address)
    with Cluster(ray="auto", cpu=True) as cluster:
        cluster.start()
        workers = cluster.tf_configs[0]["cluster"]["worker"]
        assert sorted(w.rsplit(":", 1)[0] for w in workers) == ["127.0.0.2", "127.0.0.3"], workers
        result = cluster.run("import os, json\n"
                             "print(os.environ['OMP_NUM_THREADS'], json.loads(os.environ['TF_CONFIG'])['task']['index'])")
        for i in range(2):
            assert result.stdout(i).split() == ["1", str(i)], result.stdout(i)
        pids = [s.pid for s in cluster.status()]
        # one relay per node (launchers/ray/node_templates.py): the agents of its template and workers
        assert len(ray_env.actor_pids()) == 2
    assert all(pid is not None and wait_until(lambda p=pid: not running(p), 15) for pid in pids), pids
    # the nodes' relays stay with the templates for the notebook's next cluster (ray_env ends them)
    assert len(ray_env.actor_pids()) == 2, ray_env.actor_pids()
    assert all(state == "REMOVED" for state in ray_env.placement_group_states())


@pytest.mark.parametrize(("address", "env", "shown"), [
    ("127.0.0.1:1", None, "127.0.0.1:1"),
    ("ray://127.0.0.1:1", None, "ray://127.0.0.1:1"),
    ("auto", "127.0.0.1:1", "auto (RAY_ADDRESS=127.0.0.1:1)"),
])
def test_an_unreachable_address_fails_at_once(ray_env: ray_nodes.RayTestCluster, monkeypatch: pytest.MonkeyPatch,
                                              address: str, env: str | None, shown: str) -> None:
    if env is not None:
        monkeypatch.setenv("RAY_ADDRESS", env)
    started = time.monotonic()
    with pytest.raises(ClusterStartError) as info:
        with Cluster(ray=address, cpu=True) as cluster:
            cluster.start()
    assert str(info.value).startswith(f"--ray {shown}: nothing answers at 127.0.0.1:1 "), info.value
    assert "ray start --head" in str(info.value), info.value
    print(f"unreachable address {shown}: the error after {time.monotonic() - started:.1f} s")


def test_too_few_cpus_for_the_bundles_is_named_and_nothing_is_left(ray_env: ray_nodes.RayTestCluster) -> None:
    # the nodes have 2 CPUs each: 3 bundles of 2 CPUs can never be placed
    with pytest.raises(ClusterStartError, match=r"cannot hold 3 bundles of CPU 2 \(SPREAD\): it has CPU 4 in all"):
        with Cluster(ray=ray_env.address, cpu=True, workers=3, cpus_per_worker=2) as cluster:
            cluster.start()
    # STRICT_SPREAD: 3 workers on 2 nodes
    with pytest.raises(ClusterStartError, match=r"STRICT_SPREAD needs 3 nodes .* the cluster has 2"):
        with Cluster(ray=ray_env.address, cpu=True, workers=3, ray_strategy="STRICT_SPREAD") as cluster:
            cluster.start()
    assert not ray_env.actor_pids()


def test_without_ray_installed_the_error_says_what_to_install(ray_env: ray_nodes.RayTestCluster) -> None:
    code = textwrap.dedent(f"""
        import sys
        sys.modules["ray"] = None  # as if Ray were not installed
        from mwnotebook import Cluster, ConfigError
        try:
            Cluster(ray={ray_env.address!r}, cpu=True).start()
        except ConfigError as exc:
            print("ConfigError:", exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "ConfigError: --ray needs Ray" in done.stdout and "pip install 'mwnotebook[ray]'" in done.stdout, \
        done.stdout + done.stderr[-2000:]


def test_a_sigkilled_notebook_process_leaves_no_actor_agent_or_kernel(ray_env: ray_nodes.RayTestCluster) -> None:
    code = textwrap.dedent(f"""
        import time
        from mwnotebook import Cluster
        cluster = Cluster(ray={ray_env.address!r}, cpu=True)
        cluster.start()
        print("TEMPLATES", *[t.pid for t in cluster.launcher.templates], flush=True)
        print("PIDS", *[s.pid for s in cluster.status()], flush=True)
        time.sleep(600)
    """)
    notebook = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, **ray_env.env()})
    try:
        line, templates = "", set()
        assert notebook.stdout is not None
        while not line.startswith("PIDS"):
            line = notebook.stdout.readline()
            assert line, "the notebook process ended before its workers started"
            if line.startswith("TEMPLATES"):
                templates = {int(p) for p in line.split()[1:]}
        kernels = [int(p) for p in line.split()[1:]]
        # a relay per node (node_templates.py): its template's agent and its workers' agents
        assert len(ray_env.actor_pids()) == 2 and all(running(p) for p in kernels)
        agents = {p.pid for k in kernels for p in psutil.Process(k).parents()
                  if "mwnotebook-remote-agent" in " ".join(p.cmdline())}
        # each kernel was forked by its node's worker template (the agent in its template role): it goes too
        assert len(templates) == 2 and {psutil.Process(k).ppid() for k in kernels} == templates <= agents, \
            (templates, agents)
        killed = time.monotonic()
        notebook.send_signal(signal.SIGKILL)
        notebook.wait(10)
        assert wait_until(lambda: not ray_env.actor_pids() and not any(running(p) for p in [*kernels, *agents]), 60), \
            (ray_env.actor_pids(), [p for p in kernels if running(p)])
        print(f"notebook SIGKILL: actors, agents and kernels gone after {time.monotonic() - killed:.1f} s")
    finally:
        if notebook.poll() is None:
            notebook.kill()
            notebook.wait(10)
        if notebook.stdout is not None:
            notebook.stdout.close()
    assert all(state == "REMOVED" for state in ray_env.placement_group_states())


def kill_node_on(ray_env: ray_nodes.RayTestCluster, node: ray_nodes.RayNode, worker: int, text: str,
                 killed: list[float]) -> object:
    """An ``on_event`` that kills ``node`` the first time ``worker`` prints ``text``."""
    def on_event(event: Event) -> None:
        if (isinstance(event, WorkerOutput) and event.worker == worker and not killed
                and text in event.content.get("text", "")):
            ray_env.kill_node(node)
            killed.append(time.monotonic())
    return on_event


def test_a_node_killed_mid_training_fails_the_cell_fast(ray_env: ray_nodes.RayTestCluster) -> None:
    """The node stays dead; ``ray_env`` starts it again before the next test (a new node id)."""
    victim = ray_env.workers[1]
    killed: list[float] = []
    with Cluster(ray=ray_env.address, cpu=True) as cluster:
        cluster.start()
        worker = [w.rsplit(":", 1)[0] for w in cluster.tf_configs[0]["cluster"]["worker"]].index(victim.ip)
        with pytest.raises(ClusterRunError) as info:
            cluster.run(LONG_RUN, on_event=kill_node_on(ray_env, victim, worker, "training", killed), timeout=300)
        assert killed, "the worker never reached the training loop"
        print(f"node killed: the cell's error after {time.monotonic() - killed[0]:.1f} s")
        assert info.value.failures[0].worker == worker, info.value.failures
        assert info.value.failures[0].kind == "died", info.value.failures


def test_with_max_restarts_a_lost_nodes_worker_comes_back_on_another_node(ray_env: ray_nodes.RayTestCluster) -> None:
    """The seed, its node killed as it starts: Ray places the bundle again on the other node (it has
    2 CPUs) and the rerun on fresh workers ends with the seed's exact lines."""
    victim, survivor = ray_env.workers[1], ray_env.workers[0]
    killed: list[float] = []
    cell = 'print("starting", flush=True)\nimport time\ntime.sleep(2)\n' + SEED_CELL
    with Cluster(ray=ray_env.address, cpu=True) as cluster:
        cluster.start()
        worker = [w.rsplit(":", 1)[0] for w in cluster.tf_configs[0]["cluster"]["worker"]].index(victim.ip)
        started = time.monotonic()
        result = cluster.run(cell, on_event=kill_node_on(ray_env, victim, worker, "starting", killed),
                             timeout=600, max_restarts=1)
        assert killed, "the worker never started the cell"
        [restart] = result.restarts
        assert restart.worker == worker, restart
        assert any(f"Ray node {victim.ip} lost; its bundle is now on {survivor.ip}" in line
                   for line in restart.moved), restart.moved
        hosts = [w.rsplit(":", 1)[0] for w in cluster.tf_configs[0]["cluster"]["worker"]]
        assert hosts == [survivor.ip, survivor.ip], hosts
        for i in range(2):
            assert expected_line(i) in result.stdout(i, attempt=2).splitlines(), result.stdout(i, attempt=2)[-2000:]
        print(f"node killed: the seed's lines on the restarted workers {time.monotonic() - killed[0]:.1f} s "
              f"after the node's death ({time.monotonic() - started:.1f} s for the whole cell)")
