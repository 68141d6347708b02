"""Which tests share one pytest-xdist process (``--dist loadgroup``, set by tools/test.sh).

The suite runs on several processes (three in CI): most of its time is spent waiting (kernels starting, fault
detection windows, network outages), not computing. A test module is the unit that is sent to a
process, so its module-scoped fixtures (a cluster, a JupyterLab) are still made once. Modules that
share a session fixture or a machine-wide resource go to the same process, one after another:

* tests/remote: the session's SSH test hosts (tests/remote/conftest.py);
* tests/slurm: the session's Slurm test cluster (tests/slurm/conftest.py). Both make network
  namespaces on a free ``10.213.N.0/24`` subnet, named after their process, and take the subnet
  under a lock (testbed/netns_hosts.py), so the two groups may run at the same time. A test
  of another feature on those hosts (the clusters panel's) lives in that directory: a session
  fixture imported into a second conftest.py is a second fixture, and made a second namespace of the
  same name in the same process (the first CI run of that layout: "File exists");
* tests/ray: the session's Ray test cluster (tests/ray/conftest.py: a head and two nodes on
  fixed loopback addresses and ports);
* tests/hub: the session's JupyterHub and its students (tests/hub/conftest.py);
* the peer "other machine" namespace with its fixed addresses (tests/integration/
  test_network_isolation.py, reused by tests/tf/test_ps_roles.py).
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: Directories whose modules share a session fixture: one group each.
SHARED_DIRS = ("remote", "slurm", "ray", "hub")
#: The modules that make the peer host with its fixed addresses.
PEER_HOST = "peer-host"
_PEER_HOST_MODULES = ("integration/test_network_isolation.py", "tf/test_ps_roles.py")


def group_of(path: Path) -> str:
    """The xdist group of the test module at ``path``: its own path, or a shared resource's name."""
    relative = path.resolve().relative_to(TESTS).as_posix()
    top = relative.split("/")[0]
    if top in SHARED_DIRS:
        return top
    if relative in _PEER_HOST_MODULES:
        return PEER_HOST
    return relative
