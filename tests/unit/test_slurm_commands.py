"""Slurm command lines and the parsing of their answers (outputs recorded from Slurm 22.05 here),
and the --slurm / --slurm-job options. Pure: no Slurm needed."""

from __future__ import annotations

import argparse

import pytest

from mwnotebook.config import slurm_options as cmd
from mwnotebook.config.options import add_cluster_arguments, spec_from_options
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.errors import ConfigError
from mwnotebook.processes.shipped.slurm_tf_config import node_addresses

# Recorded from `scontrol --oneliner show node mwnode0,mwnode1` on the test cluster.
SCONTROL_NODES = (
    "NodeName=mwnode0 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.12 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=10.213.150.10 NodeHostName=mwnode0 "
    "Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 State=IDLE Partitions=test\n"
    "NodeName=mwnode1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.12 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=10.213.150.11 NodeHostName=mwnode1 "
    "Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 State=IDLE Partitions=test\n"
)


def test_salloc_command_line() -> None:
    args = cmd.split_salloc_args('-p gpu -t 01:00:00 --comment "two words"')
    assert args == ["-p", "gpu", "-t", "01:00:00", "--comment", "two words"]
    assert cmd.salloc_argv(args, 4, workers_per_host=2, gpus_per_worker=1) == [
        "salloc", "--no-shell", "--no-kill", "--job-name=mwnotebook", "--ntasks=4", "--ntasks-per-node=2",
        "--gpus-per-task=1", "-p", "gpu", "-t", "01:00:00", "--comment", "two words"]
    assert cmd.salloc_argv([], 2) == ["salloc", "--no-shell", "--no-kill", "--job-name=mwnotebook", "--ntasks=2"]
    # more nodes than workers (a spare node): one task per node, else salloc shrinks -N to -n
    assert "--ntasks=3" in cmd.salloc_argv(["-N", "3"], 2)
    assert "--ntasks=4" in cmd.salloc_argv(["--nodes=2-4"], 2)
    assert "--ntasks=5" in cmd.salloc_argv(["-N2"], 5)


@pytest.mark.parametrize("text, option", [
    ("-n 4", "--workers"), ("--ntasks=4", "--workers"), ("-n4", "--workers"),
    ("--ntasks-per-node 2", "--workers-per-host"), ("--gpus-per-task=1", "--gpus-per-worker"),
])
def test_salloc_options_we_set_are_refused_with_the_option_to_use(text: str, option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        cmd.split_salloc_args(text)


def test_unbalanced_quote_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="quote it as one string"):
        cmd.split_salloc_args('-p "gpu')


@pytest.mark.parametrize("line, parsed", [
    ("salloc: Granted job allocation 17", ("granted", "17")),
    ("salloc: Pending job allocation 18", ("pending", "18")),
    ("salloc: job 18 queued and waiting for resources", None),
    ("salloc: error: invalid partition specified: nosuch", None),
])
def test_salloc_lines(line: str, parsed: tuple[str, str] | None) -> None:
    assert cmd.parse_salloc_line(line) == parsed


def test_srun_runs_one_overlapping_task_on_the_named_node() -> None:
    assert cmd.srun_argv("17", "mwnode1", ["python3", "-u", "-c", "pass"]) == [
        "srun", "--jobid=17", "--nodelist=mwnode1", "--nodes=1", "--ntasks=1", "--overlap", "--quiet",
        "--job-name=mwnotebook-worker", "python3", "-u", "-c", "pass"]


def test_squeue_states() -> None:
    running = cmd.parse_squeue("RUNNING|None|mwnode[0-1]\n")
    assert running == cmd.JobState("RUNNING", "None", "mwnode[0-1]")
    assert running.active and not running.waiting and running.describe() == "RUNNING"
    pending = cmd.parse_squeue("PENDING|Resources|\n")
    assert pending is not None and pending.waiting and pending.describe() == "PENDING (Resources)"
    assert cmd.parse_squeue("") is None  # the job is gone


def test_hostnames_and_node_addresses() -> None:
    assert cmd.hostnames_argv("mwnode[0-1]") == ["scontrol", "show", "hostnames", "mwnode[0-1]"]
    assert cmd.parse_hostnames("mwnode0\nmwnode1\n") == ["mwnode0", "mwnode1"]
    # the one NodeAddr parser, shared with the exported launcher (processes/shipped/slurm_tf_config.py)
    assert node_addresses(SCONTROL_NODES) == {"mwnode0": "10.213.150.10", "mwnode1": "10.213.150.11"}


def test_worker_placement() -> None:
    assert cmd.place_workers(["a", "b"], 2) == ["a", "b"]
    assert cmd.place_workers(["a", "b"], 5) == ["a", "a", "a", "b", "b"]
    assert cmd.place_workers(["a", "b"], 4, per_node=2) == ["a", "a", "b", "b"]
    with pytest.raises(ConfigError, match="need 3 nodes"):
        cmd.place_workers(["a", "b"], 5, per_node=2)


def test_job_id_must_be_numeric() -> None:
    assert cmd.check_job_id(" 42 ") == "42"
    with pytest.raises(ConfigError, match="numeric Slurm job id"):
        cmd.check_job_id("42; rm -rf /")


def test_options_make_a_slurm_spec() -> None:
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    spec = spec_from_options(parser.parse_args(["--slurm", "-p gpu -t 10", "--workers", "4",
                                                "--workers-per-host", "2"]))
    assert spec.uses_slurm and spec.slurm == "-p gpu -t 10" and spec.workers_per_host == 2
    alone = spec_from_options(parser.parse_args(["--slurm"]))
    assert alone.uses_slurm and alone.slurm == ""
    job = spec_from_options(parser.parse_args(["--slurm-job", "123"]))
    assert job.uses_slurm and job.slurm_job == "123"
    assert not spec_from_options(parser.parse_args([])).uses_slurm
    # Different salloc arguments need a new allocation: the specs differ.
    assert spec != spec_from_options(parser.parse_args(["--slurm", "-p cpu", "--workers", "4",
                                                       "--workers-per-host", "2"]))


@pytest.mark.parametrize("fields, message", [
    (dict(slurm="-N 2", hosts=("a", "b")), "conflict"),
    (dict(slurm="-N 2", network="private"), "local workers only"),
    (dict(slurm="-n 2"), "--workers instead"),
    (dict(slurm_job="abc"), "numeric"),
    (dict(slurm="-p gpu", slurm_job="12"), "give one of them"),
    (dict(workers_per_host=2), "--hosts or --slurm"),
])
def test_bad_slurm_specs(fields: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterSpec(**fields)


def test_make_launcher_picks_slurm() -> None:
    from mwnotebook.launchers import make_launcher
    from mwnotebook.launchers.slurm.launcher import SlurmLauncher

    launcher = make_launcher(ClusterSpec(slurm="-p gpu", workers=3))
    assert isinstance(launcher, SlurmLauncher)
    assert launcher._salloc[-2:] == ["-p", "gpu"] and "--ntasks=3" in launcher._salloc


def test_timeout_bounds_the_wait_in_the_queue() -> None:
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    parser.add_argument("--timeout", type=float, default=None)
    assert spec_from_options(parser.parse_args(["--slurm", "-p x", "--timeout", "900"])).startup_timeout == 900
    assert spec_from_options(parser.parse_args(["--timeout", "900"])).startup_timeout == 60  # local: unchanged


def test_gpus_are_bound_by_slurm_per_worker() -> None:
    from mwnotebook.config.devices import visible_devices_per_worker

    # No GPU partitioning on the notebook's machine (a login node may have none): each job step
    # asks Slurm for its GPUs, and Slurm sets CUDA_VISIBLE_DEVICES in it.
    spec = ClusterSpec(slurm="-p gpu", workers=4, gpus_per_worker=2)
    assert visible_devices_per_worker(spec, gpu_count=0) == [None] * 4
    assert "--gpus-per-task=2" in cmd.srun_argv("5", "n1", ["python3"], gpus=2)
    assert "--gpus-per-task=2" in cmd.salloc_argv([], 4, gpus_per_worker=2)
