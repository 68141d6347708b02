"""Remote kernels where mwnotebook's worker kernel is not used (a host that cannot import it; chosen
here with the switch ``MWNOTEBOOK_REMOTE_WORKER_KERNEL=0``): plain ``ipykernel_launcher``, fresh and
forked, still working. The other side is tests/remote/test_remote_worker_runtime.py (a separate file:
its module-wide clusters would still run while this file's tests check the hosts for leftovers)."""

from __future__ import annotations

import json

import pytest

from mwnotebook import Cluster
from testbed import netns_hosts
from testbed.netns_hosts import CHECKOUT

from .lines import tagged_line

#: Hang bounds only, generous for a loaded 2-core machine.
pytestmark = [pytest.mark.remote, pytest.mark.slow, pytest.mark.timeout(600)]


#: What a plain kernel is: its command, the worker flag, and the hooks the set-up code adds anyway.
PLAIN = r'''
import json, os, sys
from mwnotebook.processes.runtime.after_import import pending
from mwnotebook.processes.worker_hooks import TRAINING_MODULE
_mw_training = sys.modules.get(TRAINING_MODULE)
_mw_hooks = pending(TRAINING_MODULE) if _mw_training is None else getattr(_mw_training.Model.fit, "mwnotebook_wrapped", False)
print("PLAIN " + json.dumps({"argv0": os.path.basename(sys.argv[0]), "worker_env": os.environ.get("MWNOTEBOOK_WORKER"),
                             "hooks": _mw_hooks}), flush=True)
'''


@pytest.mark.parametrize("template", [True, False], ids=["forked", "fresh"])
def test_without_the_worker_kernel_remote_kernels_are_plain_ipykernel_with_the_hooks(
        ssh_home: netns_hosts.TestNet, template: bool) -> None:
    """The path of a host that cannot import mwnotebook's worker kernel (chosen here with the switch
    MWNOTEBOOK_REMOTE_WORKER_KERNEL=0): plain ipykernel_launcher, which still works, and still gets
    the worker hooks from the set-up code where mwnotebook is importable (engine/workers/bootstrap.py HOOKS_CODE)."""
    hosts = tuple(h.alias for h in ssh_home.hosts)
    env = {"PYTHONPATH": CHECKOUT, "MWNOTEBOOK_REMOTE_WORKER_KERNEL": "0"}
    with Cluster(hosts=hosts, cpu=True, template=template, env=env) as cluster:
        result = cluster.run(PLAIN, timeout=300)
    states = [json.loads(tagged_line(result, w, "PLAIN")) for w in range(2)]
    assert states == [{"argv0": "ipykernel_launcher" + (".py" if not template else ""), "worker_env": None,
                       "hooks": True}] * 2, states
