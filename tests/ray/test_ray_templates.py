"""Ray workers forked from their node's worker template (launchers/ray/launcher.py, through
launchers/remote/template_pool.py and processes/shipped/remote_template.py, as SSH and Slurm) on the
tier's real Ray cluster (ray_nodes.py): one cluster shared by this module's tests, in order (the
second kills a worker). The notebook's SIGKILL with templates is in test_ray_workers.py."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest

from mwnotebook import Cluster, WorkerDiedError
from testbed import ray_nodes
from testbed.processes import running
from testbed.seed_cell import SEED_CELL, expected_line

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster(ray_cluster: ray_nodes.RayTestCluster) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MWNOTEBOOK_TEMPLATE", raising=False)
        with Cluster(ray=ray_cluster.address, cpu=True) as started:
            started.start()
            yield started
            templates = [t.pid for t in started.launcher.templates]  # type: ignore[union-attr]
    assert templates and all(pid is not None for pid in templates)
    gone = psutil.wait_procs([psutil.Process(p) for p in templates if p is not None and running(p)], timeout=30)[1]
    assert not gone, f"worker templates left after the cluster stopped: {[p.pid for p in gone]}"


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
