"""The teacher's caps: what one user's notebooks may start, read once from the environment.

Three variables, set for the single-user server (a hub through ``c.Spawner.environment``,
``c.Spawner.cpu_limit`` and ``c.Spawner.mem_limit``; a single server in its own environment) and
inherited by every kernel it starts:

- ``MWNOTEBOOK_MAX_WORKERS=N``: at most N TensorFlow tasks (every chief, worker, parameter server
  and evaluator process mwnotebook starts) of this user at once, across all their kernels and
  clusters. The count of running ones comes from the clusters' state files (mwnotebook/registry/);
  the check is engine/class_caps.py.
- ``CPU_LIMIT`` (a float, cores; JupyterHub exports it): the thread pools of a local cluster's
  tasks (``TF_NUM_INTRAOP_THREADS``, ``TF_NUM_INTEROP_THREADS``, ``OMP_NUM_THREADS``) default to
  the task's share, ``floor(CPU_LIMIT / tasks)`` and at least 1. A variable the user set (in the
  environment, or with ``--env``) wins.
- ``MEM_LIMIT`` (bytes; JupyterHub exports it): a local cluster whose estimated footprint
  (:data:`MEASURED`: a worker template per kernel plus each task, after the seed cell) would pass it
  is refused.

Pure: parsing and arithmetic only. :meth:`ClassCaps.from_environ` is called once per cluster (the
facade, engine/cluster.py) or per notebook session and the value handed down; nothing here reads
``os.environ`` by itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from mwnotebook.errors import ConfigError

MAX_WORKERS_VAR = "MWNOTEBOOK_MAX_WORKERS"
CPU_LIMIT_VAR = "CPU_LIMIT"
MEM_LIMIT_VAR = "MEM_LIMIT"
#: The registry switch (mwnotebook/registry/publication.py): without state files no cap can count.
REGISTRY_VAR = "MWNOTEBOOK_REGISTRY"
#: The thread pools a CPU share sets: TensorFlow's two pools (read when a worker's runtime starts,
#: after the fork from its template: launchers/local/template_pool.py ``RUNTIME_ENV``) and OpenMP's.
THREAD_VARS = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")

MIB = 2 ** 20
_UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Footprint:
    """Memory (PSS, bytes) of a worker template and of one TensorFlow task after the seed cell.

    Re-measured with ``python -m benchmarks.probes.class_footprint`` (benchmarks/probes/class_footprint.py)."""

    template: int
    task: int


#: Measured on a 2-core machine (TF 2.21 CPU, workers forked from a template, after the seed cell): the
#: PSS of a template and its workers summed, 670 MiB with 2 workers and 897 MiB with 4, fitted as
#: template + N x task (docs/guide/caps.md has the figures and the command).
MEASURED = Footprint(template=443 * MIB, task=114 * MIB)


def _positive_int(name: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a whole number: set it to the most TensorFlow tasks "
                          f"(workers, chief, parameter servers, evaluator) one user may run at once, "
                          f"e.g. {name}=4, or unset it for no cap") from None
    if value < 1:
        raise ConfigError(f"{name}={text!r}: it must be at least 1 (a TensorFlow task per worker), "
                          f"or unset for no cap")
    return value


def _cpu(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError(f"{CPU_LIMIT_VAR}={text!r} is not a number: it is the cores this server may use "
                          f"(JupyterHub's c.Spawner.cpu_limit exports it), e.g. {CPU_LIMIT_VAR}=2 or 0.5; "
                          "unset it for no CPU cap") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{CPU_LIMIT_VAR}={text!r}: it must be a number of cores above 0, e.g. 2 or 0.5; "
                          "unset it for no CPU cap")
    return value


def _memory(text: str) -> int:
    match = _BYTES.match(text)
    if match is None:
        raise ConfigError(f"{MEM_LIMIT_VAR}={text!r} is not a size: it is bytes (JupyterHub's "
                          f"c.Spawner.mem_limit exports them), e.g. {MEM_LIMIT_VAR}=4294967296 or 4G; "
                          "unset it for no memory cap")
    value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value <= 0:
        raise ConfigError(f"{MEM_LIMIT_VAR}={text!r}: it must be above 0 bytes, e.g. 4G; unset it for no memory cap")
    return value


def size_text(value: int) -> str:
    """``1.5 GiB`` / ``260 MiB`` for a message."""
    if value >= 2 ** 30:
        return f"{value / 2 ** 30:.1f} GiB"
    return f"{value / MIB:.0f} MiB"


@dataclass(frozen=True)
class ClassCaps:
    """The caps in force for this user's clusters (all None: no cap, nothing is checked)."""

    max_workers: int | None = None
    cpu_limit: float | None = None
    mem_limit: int | None = None
    #: Thread variables the environment already sets: the user's own values win over a share.
    preset_threads: frozenset[str] = field(default_factory=frozenset)
    footprint: Footprint = MEASURED

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ClassCaps:
        """The caps of ``environ`` (a single-user server's, inherited by its kernels).

        An unset or empty variable is no cap. Raises :class:`ConfigError` naming the variable for a
        value that is not a number, zero or negative, before anything starts."""
        def given(name: str) -> str | None:
            text = environ.get(name)
            return text if text is not None and text.strip() else None

        max_text, cpu_text, mem_text = given(MAX_WORKERS_VAR), given(CPU_LIMIT_VAR), given(MEM_LIMIT_VAR)
        max_workers = _positive_int(MAX_WORKERS_VAR, max_text) if max_text is not None else None
        cpu_limit = _cpu(cpu_text) if cpu_text is not None else None
        mem_limit = _memory(mem_text) if mem_text is not None else None
        if (max_workers is not None or mem_limit is not None) and environ.get(REGISTRY_VAR, "1") == "0":
            which = MAX_WORKERS_VAR if max_workers is not None else MEM_LIMIT_VAR
            raise ConfigError(f"{which} counts the clusters your kernels run from their state files, which "
                              f"{REGISTRY_VAR}=0 turns off: unset {REGISTRY_VAR} (or unset {which})")
        preset = frozenset(name for name in THREAD_VARS if given(name) is not None)
        return cls(max_workers, cpu_limit, mem_limit, preset)

    @property
    def counts_running(self) -> bool:
        """Whether a start must count what this user runs already (a task or memory cap is set)."""
        return self.max_workers is not None or self.mem_limit is not None

    def threads_per_task(self, tasks: int) -> int | None:
        """Each of ``tasks`` local tasks' share of ``CPU_LIMIT`` in threads (None: no CPU cap)."""
        if self.cpu_limit is None:
            return None
        return max(1, math.floor(self.cpu_limit / max(1, tasks)))

    def thread_env(self, tasks: int, extra_preset: Mapping[str, str] | None = None) -> dict[str, str]:
        """The thread variables a local cluster of ``tasks`` TensorFlow tasks gives each task by
        default; none that the environment or ``extra_preset`` (the cluster's ``--env``) already sets."""
        share = self.threads_per_task(tasks)
        if share is None:
            return {}
        own = set(self.preset_threads) | set(extra_preset or {})
        return {name: str(share) for name in THREAD_VARS if name not in own}

    def memory_needed(self, tasks: int, templates: int) -> int:
        """Bytes estimated for ``tasks`` local tasks forked from ``templates`` worker templates."""
        return templates * self.footprint.template + tasks * self.footprint.task

    def lines(self) -> list[str]:
        """The caps as a reader of ``%mwcluster status`` wants them ([] when none is set)."""
        out = []
        if self.max_workers is not None:
            out.append(f"{MAX_WORKERS_VAR}={self.max_workers}: at most {self.max_workers} TensorFlow tasks "
                       "of yours at once, across your kernels")
        if self.cpu_limit is not None:
            out.append(f"{CPU_LIMIT_VAR}={self.cpu_limit:g}: a local task's TensorFlow/OpenMP threads default "
                       f"to floor({self.cpu_limit:g} / tasks), at least 1"
                       + (f" (yours: {', '.join(sorted(self.preset_threads))} set)" if self.preset_threads else ""))
        if self.mem_limit is not None:
            out.append(f"{MEM_LIMIT_VAR}={self.mem_limit} ({size_text(self.mem_limit)}): local clusters are "
                       f"estimated at {size_text(self.footprint.template)} per worker template + "
                       f"{size_text(self.footprint.task)} per task")
        return out


def cluster_tasks(workers: int, ps: int = 0, chief: bool = False, evaluator: bool = False,
                  notebook_coordinator: bool = False) -> int:
    """The processes a cluster of these options runs TensorFlow in (what the task cap counts).

    Every training task (with ``--ps``: the coordinator, ``workers`` worker servers and ``ps``
    parameter servers; with ``--chief`` the chief is one of ``workers``) and the evaluator; a
    ``--coordinator notebook`` coordinator is the notebook's own process, not a new one."""
    training = 1 + workers + ps if ps > 0 else workers
    return training + (1 if evaluator else 0) - (1 if ps > 0 and notebook_coordinator else 0)
