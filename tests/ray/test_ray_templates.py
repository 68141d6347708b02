"""Ray workers forked from their node's worker template (launchers/ray/launcher.py, through
launchers/remote/template_pool.py and processes/shipped/remote_template.py, as SSH and Slurm) on the
tier's real Ray cluster (ray_nodes.py): one cluster shared by this module's tests, in order (the
second kills a worker); first, in a notebook process of its own, a second cluster with other
options forks from the templates the first one started, and the notebook's SIGKILL ends everything
(launchers/ray/node_templates.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import psutil
import pytest

from mwnotebook import Cluster, WorkerDiedError
from mwnotebook.engine.loop import background_loop
from mwnotebook.launchers.ray.node_templates import notebook_templates
from testbed import ray_nodes
from testbed.processes import running
from testbed.seed_cell import SEED_CELL, expected_line

pytestmark = [pytest.mark.ray, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]


#: A notebook process: a first cluster, stopped; a second one with other options; then it waits.
SECOND_CLUSTER = """
import time
from mwnotebook import Cluster

def show(cluster, tag):
    print(tag, *[f"{t.place}={t.pid}" for t in cluster.launcher.templates], flush=True)
    print(tag + "-KERNELS", *[s.pid for s in cluster.status()], flush=True)

with Cluster(ray=ADDRESS, cpu=True) as first:
    first.start()
    show(first, "FIRST")
started = time.monotonic()
second = Cluster(ray=ADDRESS, cpu=True, env={"MY_SETTING": "2"}, max_restarts=1)
second.start()
print(f"SECOND-START {time.monotonic() - started:.1f}", flush=True)
show(second, "SECOND")
print("READY", flush=True)
time.sleep(600)
"""


def test_a_second_cluster_forks_from_the_first_ones_templates_and_all_ends_with_the_notebook(
        ray_env: ray_nodes.RayTestCluster) -> None:
    code = SECOND_CLUSTER.replace("ADDRESS", repr(ray_env.address))
    env = {k: v for k, v in os.environ.items() if k != "MWNOTEBOOK_TEMPLATE"}
    notebook = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True,
                                env={**env, **ray_env.env()})
    lines: dict[str, list[str]] = {}
    try:
        assert notebook.stdout is not None
        while "READY" not in lines:
            line = notebook.stdout.readline()
            assert line, f"the notebook process ended early: {lines}"
            tag, *rest = line.split()
            lines[tag] = rest
        first, second = dict(t.split("=") for t in lines["FIRST"]), dict(t.split("=") for t in lines["SECOND"])
        assert len(first) == 2 and second == first, (first, second)  # the same template on each node
        templates = {int(p) for p in first.values()}
        old_kernels = [int(p) for p in lines["FIRST-KERNELS"]]
        kernels = [int(p) for p in lines["SECOND-KERNELS"]]
        assert not any(running(p) for p in old_kernels)  # the first cluster's workers ended with it
        assert {psutil.Process(k).ppid() for k in kernels} == templates, (kernels, templates)
        print(f"second cluster started in {lines['SECOND-START'][0]} s (forks of the kept templates)")
        agents = {p.pid for k in kernels for p in psutil.Process(k).parents()
                  if "mwnotebook-remote-agent" in " ".join(p.cmdline())}
        killed = time.monotonic()
        notebook.send_signal(signal.SIGKILL)
        notebook.wait(10)
        ours = [*kernels, *agents, *templates]
        deadline = time.monotonic() + 60
        while (ray_env.actor_pids() or any(running(p) for p in ours)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not ray_env.actor_pids() and not any(running(p) for p in ours), \
            (ray_env.actor_pids(), [p for p in ours if running(p)])
        print(f"notebook SIGKILL: relays, templates, agents and kernels gone after {time.monotonic() - killed:.1f} s")
    finally:
        if notebook.poll() is None:
            notebook.kill()
            notebook.wait(10)
        if notebook.stdout is not None:
            notebook.stdout.close()


@pytest.fixture(scope="module")
def cluster(ray_cluster: ray_nodes.RayTestCluster) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MWNOTEBOOK_TEMPLATE", raising=False)
        with Cluster(ray=ray_cluster.address, cpu=True) as started:
            started.start()
            yield started
            templates = [t.pid for t in started.launcher.templates]  # type: ignore[union-attr]
    assert templates and all(pid is not None and running(pid) for pid in templates)  # kept for the next cluster
    background_loop().run(notebook_templates().close(), timeout=60)  # as the notebook's end would
    gone = psutil.wait_procs([psutil.Process(p) for p in templates if p is not None and running(p)], timeout=30)[1]
    assert not gone, f"worker templates left after they were ended: {[p.pid for p in gone]}"
    assert not ray_cluster.actor_pids()


def template_pids(cluster: Cluster) -> dict[str, int]:
    """Each node's template pid, by node address."""
    launcher = cluster.launcher
    assert launcher is not None
    return {t.place: int(t.pid or 0) for t in launcher.templates}  # type: ignore[attr-defined]


def worker_nodes(cluster: Cluster) -> list[str]:
    return [w.rsplit(":", 1)[0] for w in cluster.tf_configs[0]["cluster"]["worker"]]


def test_workers_are_forked_from_their_nodes_template(cluster: Cluster, ray_cluster: ray_nodes.RayTestCluster) -> None:
    templates = template_pids(cluster)
    assert sorted(templates) == sorted(n.ip for n in ray_cluster.workers), templates
    nodes = worker_nodes(cluster)
    for info, node in zip(cluster.status(), nodes):
        assert info.pid is not None and psutil.Process(info.pid).ppid() == templates[node], (info, templates)
    # TensorFlow is in memory before the first cell imports it: the template imported it once.
    first = cluster.run("import os, sys\nprint('tensorflow' in sys.modules, os.getppid())")
    assert [first.stdout(i).split() for i in range(2)] == [["True", str(templates[n])] for n in nodes]
    result = cluster.run(SEED_CELL, timeout=300)
    for i in range(2):
        assert result.stdout(i) == expected_line(i) + "\n", result.stdout(i)[-2000:]


def test_a_restart_after_a_killed_worker_forks(cluster: Cluster) -> None:
    templates = template_pids(cluster)
    old = [info.pid for info in cluster.status()]
    with pytest.raises(WorkerDiedError) as info:
        cluster.run("import os, signal, time\nif os.environ['MWNOTEBOOK_WORKER_INDEX'] == '1':\n"
                    "    os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(60)", timeout=120)
    assert info.value.worker == 1
    result = cluster.run("import os, sys\nprint(os.getppid(), 'tensorflow' in sys.modules)")
    assert set(s.pid for s in cluster.status()).isdisjoint(old)
    assert [result.stdout(i).split() for i in range(2)] == [
        [str(templates[n]), "True"] for n in worker_nodes(cluster)]
    assert template_pids(cluster) == templates  # the same templates: a fork, no new TensorFlow import

