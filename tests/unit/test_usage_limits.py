"""The memory limit each worker is flagged against (engine/usage.py, processes/shipped/proc_usage.py)
and the figures the clusters panel gets (registry/publication.py, server/service.py): pure rules,
fake readings. The real readings: tests/remote/test_remote_usage.py, tests/slurm/test_slurm_usage.py,
tests/ray/test_ray_usage.py, tests/integration/test_worker_usage.py, tests/remote/test_panel_usage.py."""

from __future__ import annotations

from pathlib import Path

from mwnotebook.engine.usage import NEAR_LIMIT, WorkerUsage, shared_limits
from mwnotebook.frontend.notebook.usage_view import usage_bundle
from mwnotebook.processes.shipped.proc_usage import memory_limit, near, slurm_memory
from mwnotebook.registry.publication import usage_entry
from mwnotebook.server.service import _published_usage

MIB = 2 ** 20


def test_near_is_at_ninety_percent_or_more() -> None:
    assert NEAR_LIMIT == 0.9
    assert near(900 * MIB, 1000 * MIB) and not near(899 * MIB, 1000 * MIB)
    assert not near(None, 1000 * MIB) and not near(900 * MIB, None)


def test_workers_of_one_host_under_one_limit_count_together() -> None:
    # two workers of node1 share its 1000 MiB (a Slurm job's --mem): 460 + 460 = 92 %, both flagged;
    # node2's worker alone at 46 % is not, nor is node1's third worker in a cgroup of its own (2000 MiB)
    usages = shared_limits([
        WorkerUsage(0, "node1", 10, 5.0, 460 * MIB, memory_limit=1000 * MIB),
        WorkerUsage(1, "node1", 11, 5.0, 460 * MIB, memory_limit=1000 * MIB),
        WorkerUsage(2, "node2", 12, 5.0, 460 * MIB, memory_limit=1000 * MIB),
        WorkerUsage(3, "node1", 13, 5.0, 460 * MIB, memory_limit=2000 * MIB),
        WorkerUsage(4, "node3", None, None, None, "not started"),
    ])
    assert [u.limit_used for u in usages] == [920 * MIB, 920 * MIB, 460 * MIB, 460 * MIB, None]
    assert [u.near_limit for u in usages] == [True, True, False, False, False]
    lines = usage_bundle(usages)["text/plain"].splitlines()
    assert lines[2].endswith("NEAR ITS MEMORY LIMIT (92% with this host's other workers)"), lines
    assert lines[5].split()[-1] == "2000" and lines[6].endswith("not started")


def test_a_worker_alone_is_flagged_by_its_own_memory() -> None:
    alone = shared_limits([WorkerUsage(0, "h", 1, 1.0, 950 * MIB, memory_limit=1000 * MIB)])[0]
    assert alone.near_limit and usage_bundle([alone])["text/plain"].splitlines()[2].endswith(
        "NEAR ITS MEMORY LIMIT (95%)")


def test_slurms_memory_from_the_steps_environment() -> None:
    assert slurm_memory({"SLURM_MEM_PER_NODE": "4096"}) == 4096 * MIB
    assert slurm_memory({"SLURM_MEM_PER_CPU": "1024", "SLURM_CPUS_ON_NODE": "2"}) == 2048 * MIB
    assert slurm_memory({"SLURM_MEM_PER_CPU": "1024"}) is None  # no CPU count: not guessed
    assert slurm_memory({"SLURM_JOB_ID": "7"}) is None and slurm_memory({"SLURM_MEM_PER_NODE": "0"}) is None


def test_the_limit_is_the_smallest_of_memtotal_the_cgroup_and_slurm(tmp_path: Path) -> None:
    (tmp_path / "proc/7").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text("MemTotal:       8388608 kB\n")  # 8 GiB
    (tmp_path / "proc/7/cgroup").write_text("0::/job\n")
    (tmp_path / "sys/fs/cgroup/job").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/job/memory.max").write_text(f"{6 * 2**30}\n")
    assert memory_limit(7, str(tmp_path)) == 6 * 2**30
    assert memory_limit(7, str(tmp_path), environ={"SLURM_MEM_PER_NODE": "4096"}) == 4 * 2**30
    assert memory_limit(7, str(tmp_path), environ={"SLURM_MEM_PER_NODE": "16384"}) == 6 * 2**30
    assert memory_limit(8, "/nonexistent", environ={"SLURM_MEM_PER_NODE": "4096"}) == 4 * 2**30


def test_the_panel_gets_the_last_figures_and_their_age() -> None:
    usage = shared_limits([WorkerUsage(0, "h", 1, 12.5, 950 * MIB, memory_limit=1000 * MIB)])[0]
    entry = usage_entry(usage)
    assert entry["memory_bytes"] == 950 * MIB and entry["near_limit"] is True
    shown = _published_usage(entry, entry["read_at"] + 7)
    assert shown == {"cpu_percent": 12.5, "memory_bytes": 950 * MIB, "memory_limit": 1000 * MIB,
                     "near_limit": True, "usage_age": 7}
    assert _published_usage(None, 0.0)["usage_age"] is None  # never read: nothing shown
