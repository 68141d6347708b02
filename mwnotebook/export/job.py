"""The one way into export: ``%%mwtrain --export DIR [--format F]`` and ``mwnotebook export`` both call
:func:`export_job`, which picks the writer of the format.

Formats, each named for what it writes:

- ``shell`` (the default): shell scripts, one per TensorFlow task (``worker-<i>.sh``; with roles
  ``chief.sh``, ``ps-<j>.sh``, ``evaluator.sh``), ``run-local.sh`` and a README
  (export/scripts.py, export/roles.py). ``launchers``, its earlier name, is still accepted.
- ``slurm``: a Slurm batch job, ``job.sbatch`` (export/formats.py).
- ``tfjob``: a Kubernetes TFJob manifest, ``tfjob.yaml`` (export/formats.py).
- ``ray``: a Ray job's entrypoint, ``ray_job.py``, for ``ray job submit`` (export/ray_job.py).

Importing this module is cheap (the magic's parser reads :data:`FORMATS`); the writers load when
something is exported.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mwnotebook.errors import ConfigError

if TYPE_CHECKING:
    from mwnotebook.config.spec import ClusterSpec

SHELL = "shell"
RAY = "ray"
FORMATS = (SHELL, "slurm", "tfjob", RAY)
#: Earlier names of a format, still accepted on the command line and in the magic.
OLD_NAMES = {"launchers": SHELL}
FORMAT_HELP = ("what to write: shell scripts, one per worker, and run-local.sh (shell, the default; "
               "formerly 'launchers'), a Slurm batch job (slurm: job.sbatch), a Kubernetes TFJob "
               "manifest (tfjob: tfjob.yaml), or a Ray job's entrypoint for ray job submit (ray: ray_job.py)")


class ExportedFiles(Protocol):
    """What an export wrote (``scripts.ExportedJob``, ``formats.ExportedBatchJob``, ``ray_job.ExportedRayJob``)."""

    @property
    def directory(self) -> Path: ...

    def summary(self) -> str: ...


def format_name(text: str) -> str:
    """``text`` as a format of :data:`FORMATS` (an old name mapped to its new one); argparse's
    ``type=`` of ``--format``, so ``choices`` sees the new name."""
    return OLD_NAMES.get(text, text)


def add_format_argument(parser: argparse.ArgumentParser, help_prefix: str = "") -> None:
    """``--format``, the same option for the magic and the command."""
    parser.add_argument("--format", default=SHELL, type=format_name, choices=FORMATS,
                        help=help_prefix + FORMAT_HELP)


def export_job(code: str, out_dir: str | Path, spec: ClusterSpec, fmt: str = SHELL, *,
               ports: Sequence[int] | None = None, python: str | None = None,
               image: str | None = None) -> ExportedFiles:
    """Write ``code`` (a cell or a script) for ``spec`` into ``out_dir`` as ``fmt``.

    ``ports`` (one TF port per worker) applies to ``shell`` only: a batch job's ports come from the
    scheduler's nodes at run time. ``python``: the interpreter the job runs (default
    ``spec.python``, else ``python3``); ``image``: the container image of a ``tfjob``. Raises
    :class:`ConfigError` for an unknown format or a bad ``out_dir`` before it writes anything.
    """
    fmt = format_name(fmt)
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    if fmt == SHELL:
        from mwnotebook.export.scripts import export_cell

        return export_cell(code, out_dir, spec, ports=ports, python=python)
    if fmt == RAY:
        from mwnotebook.export.ray_job import export_ray_job

        return export_ray_job(code, out_dir, spec, python=python)
    from mwnotebook.export.formats import export_format

    return export_format(code, out_dir, spec, fmt, python=python, image=image)
