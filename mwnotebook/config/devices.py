"""Which GPUs each local worker gets: disjoint ``CUDA_VISIBLE_DEVICES`` sets. Pure.

Never imports TensorFlow (that would grab the GPUs in the notebook process). The count of GPUs
on the machine comes from the NVIDIA driver's ``/proc/driver/nvidia/gpus`` (one entry per GPU,
else ``nvidia-smi -L``), and only when ``CUDA_VISIBLE_DEVICES`` is unset: when it is set, the notebook's own
selection is
what workers share out ("respect an existing ``CUDA_VISIBLE_DEVICES``").

Worker ``i`` of ``--gpus-per-worker K`` gets the visible entries ``i*K .. i*K+K-1``. Entries
are passed through as written (indices, ``GPU-<uuid>``, ``MIG-<uuid>``), so a selection such as
``CUDA_VISIBLE_DEVICES=2,3`` gives worker 0 ``"2"`` and worker 1 ``"3"``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mwnotebook.errors import ConfigError

if TYPE_CHECKING:
    from mwnotebook.config.spec import ClusterSpec

NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")
#: ``CUDA_VISIBLE_DEVICES`` value that hides every GPU (what ``--cpu`` sets).
NO_GPU = "-1"


def parse_visible_devices(value: str | None) -> list[str] | None:
    """Entries of a ``CUDA_VISIBLE_DEVICES`` value; ``None`` when the variable is unset.

    Like CUDA, stops at the first invalid entry: ``"0,-1,1"`` makes only GPU 0 visible, and
    ``""`` or ``"-1"`` hide all GPUs.
    """
    if value is None:
        return None
    entries: list[str] = []
    for raw in value.split(","):
        item = raw.strip()
        if not item or item.startswith("-"):
            break
        if not (item.isdigit() or item.startswith(("GPU-", "MIG-"))):
            break
        entries.append(item)
    return entries


def count_machine_gpus(proc_dir: Path = NVIDIA_PROC, nvidia_smi: str | None = "nvidia-smi") -> int:
    """GPUs the NVIDIA driver exposes (0 without a driver).

    Reads ``/proc/driver/nvidia/gpus``; where that is missing (some sandboxes and containers
    hide it), counts the ``GPU n:`` lines of ``nvidia-smi -L``.
    """
    try:
        return sum(1 for _ in proc_dir.iterdir())
    except OSError:
        pass
    exe = shutil.which(nvidia_smi) if nvidia_smi else None
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def visible_gpus(environ: Mapping[str, str] | None = None, gpu_count: int | None = None) -> list[str]:
    """The GPU entries this process may hand out: its ``CUDA_VISIBLE_DEVICES``, else ``0..n-1``."""
    env = os.environ if environ is None else environ
    selected = parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    if selected is not None:
        return selected
    count = count_machine_gpus() if gpu_count is None else gpu_count
    return [str(i) for i in range(count)]


def partition_gpus(workers: int, gpus_per_worker: int, visible: Sequence[str]) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` per worker: disjoint consecutive slices of ``visible``.

    Raises :class:`ConfigError` when ``workers * gpus_per_worker`` exceeds ``len(visible)``.
    """
    if workers < 1:
        raise ConfigError(f"workers must be >= 1 (got {workers})")
    if gpus_per_worker < 1:
        raise ConfigError(f"--gpus-per-worker must be >= 1 (got {gpus_per_worker}); "
                          "use --cpu for workers without GPUs")
    need = workers * gpus_per_worker
    if need > len(visible):
        seen = ",".join(visible) if visible else "none"
        raise ConfigError(
            f"{workers} workers x {gpus_per_worker} GPUs per worker need {need} GPUs, but only "
            f"{len(visible)} are visible here ({seen}). Use fewer workers, a smaller "
            "--gpus-per-worker, or --cpu.")
    return [",".join(visible[i * gpus_per_worker:(i + 1) * gpus_per_worker])
            for i in range(workers)]


def partition_gpus_by_host(worker_hosts: Sequence[str], gpus_per_worker: int) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` for workers on remote hosts (one host name per worker).

    Each host numbers its own GPUs from 0: the n-th worker on a host gets
    ``n*K .. n*K+K-1``. Remote GPU counts are not known here; a worker given a GPU its host lacks
    sees fewer devices, which ``mw.visible_devices()`` shows in the status view.
    """
    if gpus_per_worker < 1:
        raise ConfigError(f"--gpus-per-worker must be >= 1 (got {gpus_per_worker})")
    seen: dict[str, int] = {}
    out: list[str] = []
    for host in worker_hosts:
        slot = seen.get(host, 0)
        seen[host] = slot + 1
        out.append(",".join(str(slot * gpus_per_worker + j) for j in range(gpus_per_worker)))
    return out


def visible_devices_per_worker(spec: ClusterSpec, *, environ: Mapping[str, str] | None = None,
                               gpu_count: int | None = None) -> list[str | None]:
    """Each worker's ``CUDA_VISIBLE_DEVICES`` for a :class:`mwnotebook.ClusterSpec`.

    ``None`` means "leave the launcher's environment as it is". ``--cpu`` hides every GPU; with
    ``--gpus-per-worker``, local workers get disjoint slices of the GPUs this process sees
    (:func:`partition_gpus`), workers on ``spec.hosts`` slices of their own host's GPUs
    (:func:`partition_gpus_by_host`). Raises :class:`ConfigError` before anything starts.
    (``--cpu`` together with ``--gpus-per-worker`` never gets here: the spec refuses it.)
    """
    if spec.cpu:
        return [NO_GPU] * spec.workers
    if spec.gpus_per_worker is None:
        return [None] * spec.workers
    if spec.backend == "slurm":
        return [None] * spec.workers  # Slurm binds each worker's GPUs itself (srun --gpus-per-task)
    if spec.placement:
        return list(partition_gpus_by_host([str(h.key) for h in spec.placement], spec.gpus_per_worker))
    return list(partition_gpus(spec.workers, spec.gpus_per_worker, visible_gpus(environ, gpu_count)))
