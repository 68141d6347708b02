"""A Slurm worker near its job's memory is flagged before anything kills it (engine/usage.py): the
test Slurm enforces no memory (no cgroup plugin, no accounting), but a notebook that runs in a job
with ``--mem`` (a shell of salloc, a batch script, batchspawner) has ``SLURM_MEM_PER_NODE``, srun
passes it to the worker's agent (a job step), and the agent reads it as the limit
(processes/shipped/proc_usage.py ``slurm_memory``). One one-node job of 900 MiB (the nodes' RealMemory
is 1000, testbed/slurm_cluster.py) whose worker grows to 93 % of it, flagged in ``Cluster.usage()``,
``%mwcluster status``'s table and what the clusters panel's API lists; ~30 s."""

from __future__ import annotations

from pathlib import Path

import pytest

from mwnotebook import Cluster
from mwnotebook.frontend.notebook.usage_view import usage_bundle
from mwnotebook.server.service import ClusterService
from testbed import slurm_cluster
from tests._shared.waits import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(400)]

MIB = 2 ** 20
#: Grows the worker's resident memory to 93 % of its job's memory on the node.
GROW = '''import os
limit = {limit}
with open("/proc/self/statm") as f:
    resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
held = b"x" * max(0, int(0.93 * limit) - resident)
print(limit)
'''


def test_a_worker_at_93_percent_of_its_jobs_memory_is_flagged(slurm_env: slurm_cluster.SlurmCluster,
                                                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # as in a shell of `salloc --mem=900` (or a batch script): Slurm sets it there, srun passes it on
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "900")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    with Cluster(slurm="-N 1 --mem=900", workers=1, cpu=True) as cluster:
        quiet = cluster.usage()
        assert [u.memory_limit for u in quiet] == [900 * MIB] and not quiet[0].near_limit, quiet
        result = cluster.run(GROW.format(limit=quiet[0].memory_limit), timeout=300)
        assert result.ok and result.stdout(0).strip() == str(900 * MIB), result.stdout(0)
        grown = cluster.usage()
        # what the clusters panel's REST API answers (server/service.py, without HTTP): the figures just read
        listed = wait_for(lambda: [w for c in ClusterService(tmp_path / "mwnotebook").clusters() for w in c["workers"]
                                   if w["near_limit"]], 30, 0.2, "the published flag")
    assert grown[0].memory_limit == 900 * MIB and grown[0].near_limit, grown
    note = usage_bundle(grown)["text/plain"].splitlines()[2]
    assert "NEAR ITS MEMORY LIMIT (9" in note, note
    assert [(w["host"], w["memory_limit"]) for w in listed] == [(grown[0].host, 900 * MIB)], listed
