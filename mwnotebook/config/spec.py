"""What a cluster is: :class:`ClusterSpec`, validated before anything starts. Pure: no processes, no
TensorFlow. The environment each worker gets follows from it in :mod:`mwnotebook.config.worker_env`."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from mwnotebook.config.hosts import HostSpec, resolve_host, worker_hosts
from mwnotebook.config.role_checks import check_roles
from mwnotebook.config.roles import RoleLayout
from mwnotebook.config.task_placement import PLACE_ROLES, TaskPlacement, check_place, place_tasks
from mwnotebook.errors import ConfigError
from mwnotebook.shared.collectives import COLLECTIVES

#: More local workers than this is almost certainly a typo (each one is a full TensorFlow process).
MAX_WORKERS = 64

#: Variables mwnotebook sets itself for every worker; ``--env`` may not override them.
RESERVED_ENV = ("TF_CONFIG", "MWNOTEBOOK_WORKER_INDEX", "MWNOTEBOOK_NUM_WORKERS")

#: Where local workers' TensorFlow ports live: a private network namespace, the host's network, or
#: the namespace when this machine allows one and the host otherwise.
NETWORK_MODES = ("auto", "private", "host")
MIXED_PRECISION = ("float16", "bfloat16")
#: Where a --ps cluster's coordinator runs: a kernel of its own (the cell runs there), or the
#: notebook's own kernel (opt-in, engine/roles/notebook_coordinator.py says what that costs).
COORDINATORS = ("kernel", "notebook")

#: Which engine runs a cluster's kernels (:attr:`ClusterSpec.backend`).
Backend = Literal["local", "ssh", "slurm", "ray"]

#: An environment variable's name as a shell assigns it: ``--env``'s names (here) and an export's
#: launchers (export/scripts.py) are checked with it.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_max_restarts(value: object, name: str = "--max-restarts") -> int:
    """``value`` as a restart count (a whole number >= 0; not a bool); :class:`ConfigError` naming
    ``name`` otherwise. The one rule for the cluster's option and a run's own count
    (``engine/cell/restarts.py`` ``CellLimits``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a whole number >= 0, got {value!r}")
    return value


def tf_keras_installed() -> bool:
    """True when the ``tf_keras`` package is importable in this interpreter (checked without importing)."""
    return importlib.util.find_spec("tf_keras") is not None


@dataclass(frozen=True)
class ClusterSpec:
    """Everything that decides which worker processes a cluster runs.

    Two specs that compare equal can share one running cluster; any difference needs new processes,
    because TensorFlow cannot reconfigure its collectives inside a live process.
    """

    workers: int = None  # type: ignore[assignment]  # None: one per --hosts slot, else 2; an int after init
    cpu: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    legacy_keras: bool | None = None  # None: on when tf_keras is installed
    python: str | None = None
    hosts: tuple[str, ...] = ()
    workers_per_host: int | None = None
    tf_address: str | None = None
    gpus_per_worker: int | None = None
    collective: str = "auto"
    mixed_precision: str | None = None
    xla: bool = False
    # Neither changes which processes are needed: a cluster started with --preload serves a plain
    # %%mwtrain of the same topology, and vice versa.
    preload: bool = field(default=False, compare=False)
    network: str = "auto"
    # Fork local workers from a TensorFlow-imported template (launchers/local/template_pool.py); the workers
    # are the same either way.
    template: bool = field(default=True, compare=False)
    startup_timeout: float = field(default=60.0, compare=False)
    #: ``--max-restarts``: run a cell again on fresh workers up to this many times when it lost
    #: workers (mwnotebook/engine/cell/restarts.py). Needs no other processes, so not compared.
    max_restarts: int = field(default=0, compare=False)
    #: ``--slurm``: salloc arguments ("" = none, or the allocation we are in); ``--slurm-job``: a job id.
    slurm: str | None = None
    slurm_job: str | None = None
    #: ``--slurm-login HOST``: run the Slurm commands on this login node over SSH and reach the
    #: kernels through it (the notebook is off the cluster's network).
    slurm_login: str | None = None
    #: ``--ray ADDRESS``: the workers run on this Ray cluster (``auto``, ``HOST:PORT``, ``ray://HOST:10001``),
    #: one placement-group bundle each (launchers/ray/); ``--ray-strategy`` places the bundles,
    #: ``--cpus-per-worker`` sizes them (config/ray_options.py checks all three).
    ray: str | None = None
    ray_strategy: str = "SPREAD"
    cpus_per_worker: int | None = None
    #: ``--ray-ssh [user@]HOST[:port]``: with ``--ray``, reach the relays and kernels (and a
    #: ``ray://`` address) through local SSH forwards over one connection to this host, the head
    #: (launchers/ray/ssh_jump.py): the notebook is off the cluster's network.
    ray_ssh: str | None = None
    #: The host of each worker (empty without ``hosts``): ``--hosts`` is parsed here, once, and
    #: everything else (launcher, GPU split, export) reads this.
    placement: tuple[HostSpec, ...] = field(init=False, compare=False, repr=False, default=())
    #: TensorFlow's other roles (config/roles.py): ``ps`` parameter servers (ParameterServerStrategy:
    #: ``workers`` worker servers and one coordinator kernel that runs the cell), ``chief`` (MWMS:
    #: replica 0 is ``chief``), ``evaluator`` (one more kernel beside training, never in its cluster).
    ps: int = 0
    chief: bool = False
    evaluator: bool = False
    #: ``--coordinator notebook``: no coordinator kernel; the notebook's own process gets the chief's
    #: TF_CONFIG and connects itself (host network only, one cluster per kernel).
    coordinator: str = "kernel"
    #: ``--force``: connect the notebook to a second cluster although it connected to one before
    #: (engine/roles/notebook_coordinator.py: what that risks). Needs no other processes, so not compared.
    force: bool = field(default=False, compare=False)
    #: ``--place ROLE=HOST[,HOST...]``: where a role's tasks run instead of the default rule
    #: (config/task_placement.py); ``{role: hosts}``, with ``--hosts`` or ``--slurm`` only.
    place: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "place", {str(role): (hosts,) if isinstance(hosts, str) else tuple(hosts)
                                           for role, hosts in dict(self.place).items()})
        object.__setattr__(self, "hosts", tuple(self.hosts))
        if self.hosts:
            # validates the host syntax and the worker count
            placement = worker_hosts(list(self.hosts), self.workers, self.workers_per_host)
            object.__setattr__(self, "placement", tuple(placement))
            if self.workers is None:
                object.__setattr__(self, "workers", len(placement))
        elif self.workers_per_host is not None and not self.uses_slurm:
            raise ConfigError("--workers-per-host only applies together with --hosts or --slurm")
        if self.workers is None:
            object.__setattr__(self, "workers", 2)
        if self.coordinator == "notebook" and self.network == "auto":
            # the notebook kernel cannot enter a private namespace: its servers' peers sit on the host
            object.__setattr__(self, "network", "host")
        self._validate()

    def _validate(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int):
            raise ConfigError(f"workers must be a whole number, got {self.workers!r}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ConfigError(
                f"workers must be between 1 and {MAX_WORKERS}, got {self.workers}: "
                "each worker is a separate TensorFlow process")
        for key, value in self.env.items():
            if not isinstance(key, str) or not ENV_NAME.match(key):
                raise ConfigError(f"--env name {key!r} is not a valid environment variable name")
            if not isinstance(value, str):
                raise ConfigError(f"--env {key} must be a string, got {type(value).__name__}")
            if key in RESERVED_ENV:
                raise ConfigError(
                    f"--env {key}=... is not allowed: mwnotebook sets {key} for each worker itself "
                    "(see %mwcluster status for the values). Remove it, or use --export to write "
                    "launchers you can edit by hand.")
        if self.cpu and "CUDA_VISIBLE_DEVICES" in self.env:
            raise ConfigError("--cpu and --env CUDA_VISIBLE_DEVICES=... conflict: --cpu hides all GPUs; "
                              "use one or the other")
        if self.gpus_per_worker is not None:
            if isinstance(self.gpus_per_worker, bool) or not isinstance(self.gpus_per_worker, int) \
                    or self.gpus_per_worker < 1:
                raise ConfigError(f"--gpus-per-worker must be a whole number >= 1, got {self.gpus_per_worker!r}")
            if self.cpu:
                raise ConfigError("--cpu and --gpus-per-worker conflict: --cpu hides all GPUs; use one or the other")
        if self.collective not in COLLECTIVES:
            raise ConfigError(f"--collective must be one of {', '.join(COLLECTIVES)}, got {self.collective!r}")
        if self.mixed_precision is not None and self.mixed_precision not in MIXED_PRECISION:
            raise ConfigError(f"--mixed-precision must be one of {', '.join(MIXED_PRECISION)}, "
                              f"got {self.mixed_precision!r}")
        if self.network not in NETWORK_MODES:
            raise ConfigError(f"--network must be one of {', '.join(NETWORK_MODES)}, got {self.network!r}")
        if self.hosts and self.network == "private":
            raise ConfigError("--network private applies to local workers only; remote hosts use their own "
                              "networks (see notebooks/04_remote_hosts.ipynb for firewalling TF's ports)")
        if self.uses_slurm or self.slurm_login is not None:
            from mwnotebook.config.slurm_options import check_slurm_spec

            check_slurm_spec(self)
        from mwnotebook.config.ray_options import check_ray_spec

        check_ray_spec(self)
        check_max_restarts(self.max_restarts)
        check_roles(self)
        self._check_place()
        if not self.startup_timeout > 0:
            raise ConfigError(f"startup_timeout must be > 0 seconds, got {self.startup_timeout!r}")

    @cached_property
    def layout(self) -> RoleLayout:
        """The TensorFlow tasks of this cluster (config/roles.py), derived here once from ``workers``,
        ``ps``, ``chief`` and ``evaluator``: every other module reads this, none recomputes it."""
        return RoleLayout(workers=self.workers, ps=self.ps, chief=self.chief, evaluator=self.evaluator)

    @cached_property
    def backend(self) -> Backend:
        """Which engine runs the kernels, decided here once: ``ray`` with ``--ray``, ``slurm`` with
        ``--slurm`` (a bare ``--slurm`` too: it is the empty string) or ``--slurm-job``, ``ssh`` with
        ``--hosts``, else ``local``. The launcher factory, the role checks, the security notice and
        the clusters panel's registry read this; none decides it again (the options' checks make the
        engines' options exclusive, so the order here only matters for a spec they refuse)."""
        if self.ray is not None:
            return "ray"
        if self.slurm is not None or self.slurm_job is not None:
            return "slurm"
        return "ssh" if self.hosts else "local"

    @property
    def remote(self) -> bool:
        """Whether the kernels run on other machines than this notebook's (every backend but ``local``)."""
        return self.backend != "local"

    @cached_property
    def task_placement(self) -> TaskPlacement | None:
        """With ``--hosts``: each task's host (config/task_placement.py), decided here once; the SSH
        launcher starts every task where this says. None otherwise (local clusters have one host; a
        Slurm launcher places the tasks with the same rule once it has its nodes)."""
        if not self.placement:
            return None
        slots = [spec.target for spec in self.placement]
        overrides = {role: tuple(resolve_host(h, self.placement).target for h in hosts)
                     for role, hosts in self.place.items()}
        return place_tasks(self.layout, slots, list(dict.fromkeys(slots)), overrides)

    def _check_place(self) -> None:
        if not self.place:
            return
        if self.backend not in ("ssh", "slurm"):
            raise ConfigError("--place applies with --hosts or --slurm (it says which machine runs a role's "
                              "tasks); a local cluster runs every task on this machine. Remove --place")
        for role in self.place:
            if role not in PLACE_ROLES:
                raise ConfigError(f"--place {role}=...: use one of {', '.join(PLACE_ROLES)}")
        check_place(self.layout, self.place)
        if self.hosts:
            _ = self.task_placement  # every host resolved (ConfigError now, not at the start)

    @property
    def uses_slurm(self) -> bool:
        """Whether the workers run as Slurm job steps (``--slurm`` or ``--slurm-job``): ``backend == "slurm"``."""
        return self.backend == "slurm"

    @property
    def use_legacy_keras(self) -> bool:
        """Whether the workers get ``TF_USE_LEGACY_KERAS=1``: as asked, else when tf_keras is installed."""
        return tf_keras_installed() if self.legacy_keras is None else self.legacy_keras
