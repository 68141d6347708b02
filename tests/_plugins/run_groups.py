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
  test_network_isolation.py, tests/tf/test_ps_roles.py; the ``peer_host`` fixture of tests/conftest.py).

The groups are handed out longest first (:func:`longest_first`), by the seconds each took on one
process in a measured run (``group_durations.json`` beside this file): with ``--dist loadgroup
--no-loadscope-reorder`` xdist sends the groups in the order of their first test, each to the next
process that runs out of work, so the long groups (the Ray, SSH, Slurm and hub tiers) start at once
on different processes and the many short modules fill in behind them; the processes then end close
together instead of one process starting a long group late. Every run under xdist writes the
seconds it measured per group and per process to ``artifacts/group_durations.json``
(:class:`GroupClock`: each group's seconds, each process's busy seconds and when it sent its last
report); copying that file here sets or updates the order. Without the file the suite's own order is
kept.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

TESTS = Path(__file__).resolve().parents[1]

#: Directories whose modules share a session fixture: one group each.
SHARED_DIRS = ("remote", "slurm", "ray", "hub")
#: The modules that make the peer host with its fixed addresses.
PEER_HOST = "peer-host"
_PEER_HOST_MODULES = ("integration/test_network_isolation.py", "tf/test_ps_roles.py")
#: Measured seconds per group (a copy of a CI run's artifacts/group_durations.json).
DURATIONS = Path(__file__).with_name("group_durations.json")
#: What a group the measured run did not have counts per test (a new module): the median test's order.
UNMEASURED_SECONDS_PER_TEST = 2.0


def group_of(path: Path) -> str:
    """The xdist group of the test module at ``path``: its own path, or a shared resource's name."""
    relative = path.resolve().relative_to(TESTS).as_posix()
    top = relative.split("/")[0]
    if top in SHARED_DIRS:
        return top
    if relative in _PEER_HOST_MODULES:
        return PEER_HOST
    return relative


class _Item(Protocol):
    fspath: Any


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The measured seconds per group; empty when there is no measured run."""
    if not path.exists():
        return {}
    return {str(group): float(seconds) for group, seconds in json.loads(path.read_text())["groups"].items()}


def longest_first(items: Sequence[_Item], durations: dict[str, float]) -> list[_Item]:
    """``items`` with each group's tests together, the groups ordered by their measured seconds (longest
    first; a group not measured counts :data:`UNMEASURED_SECONDS_PER_TEST` per test); the tests of one
    group keep their order, and groups of equal weight keep the suite's order. Without a measured run
    (``durations`` empty) the suite's order is kept: an order guessed from test counts would put a
    module of many short tests before a one-test lesson notebook."""
    if not durations:
        return list(items)
    groups: dict[str, list[_Item]] = {}
    for item in items:
        groups.setdefault(group_of(Path(str(item.fspath))), []).append(item)
    weight = {group: durations.get(group, UNMEASURED_SECONDS_PER_TEST * len(members))
              for group, members in groups.items()}
    order = sorted(groups, key=lambda group: -weight[group])  # sorted() is stable: ties keep the suite's order
    return [item for group in order for item in groups[group]]


class GroupClock:
    """Sums what each xdist group and each process spent (setup + call + teardown of every test, as the
    process reports them to the one that prints the summary) and writes it at the end of the session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started = time.monotonic()
        self.groups: dict[str, float] = defaultdict(float)
        self.processes: dict[str, float] = defaultdict(float)
        self.ended: dict[str, float] = {}

    def add(self, nodeid: str, seconds: float, process: str) -> None:
        self.ended[process] = time.monotonic() - self.started
        path = self.root / nodeid.split("::", 1)[0]
        try:
            group = group_of(path)
        except ValueError:  # not under tests/ (a test file named on the command line from elsewhere)
            return
        self.groups[group] += seconds
        self.processes[process] += seconds

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        order = sorted(self.groups, key=lambda group: -self.groups[group])
        path.write_text(json.dumps({
            "groups": {group: round(self.groups[group], 1) for group in order},
            "processes": {name: round(seconds, 1) for name, seconds in sorted(self.processes.items())},
            "processes_last_report_s": {name: round(at, 1) for name, at in sorted(self.ended.items())},
        }, indent=1) + "\n")


def under_xdist() -> bool:
    """This process is an xdist worker (the order matters only where xdist hands out the groups)."""
    return "PYTEST_XDIST_WORKER" in os.environ
