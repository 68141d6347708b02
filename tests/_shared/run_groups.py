"""Which tests share one pytest-xdist process (``--dist loadgroup``, set by tools/test.sh).

The suite runs on two processes in CI: most of its time is spent waiting (kernels starting, fault
detection windows, network outages), not computing. A test module is the unit that is sent to a
process, so its module-scoped fixtures (a cluster, a JupyterLab) are still made once. Modules that
use one machine-wide resource go to the same process, one after another:

* the SSH test hosts and the Slurm test cluster (tests/remote, tests/slurm): both pick a free
  ``10.213.N.0/24`` subnet and make network namespaces, and the Slurm cluster is made from the same
  hosts (tests/slurm/slurm_cluster.py);
* the peer "other machine" namespace with its fixed addresses (tests/integration/
  test_network_isolation.py, reused by tests/tf/test_ps_roles.py).
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: The group of modules that make network namespaces with machine-wide names and addresses.
TEST_NETWORK = "test-network"
_NETWORK_DIRS = ("remote", "slurm")
_NETWORK_MODULES = ("integration/test_network_isolation.py", "tf/test_ps_roles.py")


def group_of(path: Path) -> str:
    """The xdist group of the test module at ``path``: its own path, or a shared resource's name."""
    relative = path.resolve().relative_to(TESTS).as_posix()
    if relative.split("/")[0] in _NETWORK_DIRS or relative in _NETWORK_MODULES:
        return TEST_NETWORK
    return relative
