"""Remote worker kernels get the worker runtime of local ones (mwnotebook/processes/worker_runtime.py),
where mwnotebook is importable on the host: SSH test hosts (network namespaces, testbed/netns_hosts.py),
kernels forked from the hosts' worker templates and fresh ones.

The remote agent starts ``python -m mwnotebook.processes.worker_kernel`` there instead of
``ipykernel_launcher`` (processes/shipped/remote_agent.py ``has_worker_kernel``), and a template's
forked child installs the runtime before it serves the kernel (processes/shipped/remote_template.py
``worker_kernel``). Each piece is checked where it acts, inside the remote kernel.

The hosts would import mwnotebook from whatever the editable install points at; each cluster here
passes ``PYTHONPATH`` = the checkout under test, and the first test checks the kernels import it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from mwnotebook import Cluster
from testbed import netns_hosts
from testbed.netns_hosts import CHECKOUT

from .lines import tagged_line

#: Hang bounds only, generous for a loaded 2-core machine.
pytestmark = [pytest.mark.remote, pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(900)]

#: What the kernel is and what it installed, as one JSON line (TensorFlow imported first: a fresh
#: kernel patches the strategy classes when TensorFlow loads them).
PROBE = r'''
import json, os, sys, zmq
import tensorflow as tf
import mwnotebook
from mwnotebook.processes.runtime import containment
from mwnotebook.processes.runtime.after_import import marked
from tensorflow.python.distribute import collective_all_reduce_strategy as _mw_cars
from ipykernel.kernelapp import IPKernelApp
from ipykernel.ipkernel import IPythonKernel
print("PROBE " + json.dumps({
    "mwnotebook": mwnotebook.__file__,
    "argv0": sys.argv[0],
    "worker_env": os.environ.get("MWNOTEBOOK_WORKER"),
    "fresh_keys": marked(_mw_cars.CollectiveAllReduceStrategy.__init__, "mwnotebook_fresh_keys"),
    "ps_guard": marked(_mw_cars.CollectiveAllReduceStrategy.__init__, "mw_ps_guard"),
    "containment": containment.mode,
    "leads_group": os.getpgrp() == os.getpid(),
    "iopub_hwm": IPKernelApp.instance().iopub_socket.getsockopt(zmq.SNDHWM),
    "no_module_walk": marked(IPythonKernel.__init__, "mwnotebook_no_module_walk"),
}), flush=True)
'''

#: SIGUSR2 to itself: the faulthandler dump lands beside the kernel's connection file.
STACKS = r'''
import os, signal, time, ipykernel
from mwnotebook.processes.runtime import stack_signal
_mw_path = stack_signal.stacks_path(ipykernel.get_connection_file())
os.kill(os.getpid(), signal.SIGUSR2)
time.sleep(0.5)
with open(_mw_path) as _mw_f:
    _mw_dump = _mw_f.read()
print("STACKS", stack_signal.MAIN_THREAD_TAG in _mw_dump, "Current thread" in _mw_dump, _mw_path, flush=True)
'''

#: Two strategies in one cell, each with a real all-reduce (the keys must meet across workers).
TWO_STRATEGIES = r'''
import json
import tensorflow as tf
_mw_keys = []
for _ in range(2):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
    _mw_keys.append({"base": strategy.extended._collective_key_base, "sum": float(total)})
print("KEYS " + json.dumps(_mw_keys), flush=True)
'''


@pytest.fixture(scope="module", params=[True, False], ids=["forked", "fresh"])
def remote_cluster(test_net: netns_hosts.TestNet, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A two-host cluster importing this checkout (like conftest.py ``ssh_home``, for the module)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(test_net.home))
        mp.setenv("MWNOTEBOOK_SSH_CONFIG", str(test_net.ssh_config))
        mp.delenv("SSH_AUTH_SOCK", raising=False)
        hosts = tuple(h.alias for h in test_net.hosts)
        with Cluster(hosts=hosts, cpu=True, template=request.param, env={"PYTHONPATH": CHECKOUT}) as cluster:
            yield cluster
        left = test_net.wait_no_leftovers(10)
        assert not left, f"processes left running on the test hosts: {left}"


@pytest.fixture(scope="module")
def probe(remote_cluster: Cluster) -> list[dict]:
    result = remote_cluster.run(PROBE, timeout=300)
    return [json.loads(tagged_line(result, w, "PROBE")) for w in range(2)]


def test_the_kernel_is_mwnotebooks_worker_kernel_from_this_checkout(probe: list[dict]) -> None:
    for state in probe:
        assert state["mwnotebook"].startswith(CHECKOUT + "/"), state
        assert state["argv0"].endswith("worker_kernel.py"), state
        assert state["worker_env"] == "1", state  # so %load_ext mwnotebook is refused there


def test_strategies_get_fresh_keys_and_the_ps_guard(probe: list[dict]) -> None:
    assert [(s["fresh_keys"], s["ps_guard"]) for s in probe] == [(True, True)] * 2, probe


def test_descendants_are_contained_and_iopub_never_drops(probe: list[dict]) -> None:
    for state in probe:
        assert state["leads_group"] and state["containment"] == "process-group", state
        assert state["iopub_hwm"] == 0, state  # no high-water mark: output queues instead of being dropped


def test_forked_kernels_use_the_templates_module_list(probe: list[dict], request: pytest.FixtureRequest) -> None:
    """A kernel forked from the host's template lists its modules from the template's list (no walk
    over the shared pages, processes/runtime/module_walk.py); a fresh one walks as usual."""
    forked = request.node.callspec.params["remote_cluster"]
    assert [s["no_module_walk"] for s in probe] == [forked] * 2, probe


def test_sigusr2_dumps_the_stacks_beside_the_connection_file(remote_cluster: Cluster) -> None:
    result = remote_cluster.run(STACKS, timeout=120)
    for w in range(2):  # without the handler, SIGUSR2 would have ended the kernel
        assert tagged_line(result, w, "STACKS").startswith("True True "), result.stdout(w)


def test_two_strategies_in_one_cell_get_distinct_keys_equal_on_both_workers(remote_cluster: Cluster) -> None:
    result = remote_cluster.run(TWO_STRATEGIES, timeout=300)
    keys = [json.loads(tagged_line(result, w, "KEYS")) for w in range(2)]
    assert all(k["sum"] == 2.0 for per in keys for k in per), keys  # each all-reduce met across both workers
    assert keys[0][0]["base"] == keys[1][0]["base"] and keys[0][1]["base"] == keys[1][1]["base"], keys
    assert keys[0][0]["base"] != keys[0][1]["base"], keys  # distinct: no group key reused
    assert keys[0][0]["base"] > 0 and keys[0][1]["base"] > 0, keys  # not TensorFlow's default 0

