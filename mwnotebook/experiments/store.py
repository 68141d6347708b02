"""Where a kernel's run history lives on disk: ``<Jupyter runtime dir>/mwnotebook/runs-<kernel id>/``.

Keyed by the kernel's id, which a kernel restart keeps (its connection file ``kernel-<id>.json``
stays; see :func:`kernel_id`), so the restarted kernel lists the runs of its session again. The
directory is 0700 and every file 0600: ``runs.jsonl`` gets one line per run or change of a run (the
last line of a number wins; appending keeps a cell's cost flat however long the history grows),
``metrics-<n>.json`` the metric records of run ``n`` (written once). Other kernels' histories that
nothing changed for :data:`KEEP_DAYS` are removed when a kernel opens its own
(:meth:`RunStore.remove_stale`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

VERSION = 1
#: Another kernel's history untouched this long is removed when a kernel opens its own (the runtime
#: dir is kept across logins: one directory per notebook session would pile up).
KEEP_DAYS = 30
_KERNEL_FILE = re.compile(r"^(?:kernel-)?([0-9A-Za-z_-]{1,64})\.json$")


def kernel_id(connection_file: str) -> str | None:
    """The kernel's id from its connection file's name: ``kernel-<id>.json`` as a Jupyter server names
    it; a kernel started by jupyter_client alone (nbclient, a test) has a temporary name, which its
    restarts keep as well. None for a name that is neither."""
    match = _KERNEL_FILE.match(os.path.basename(connection_file))
    return match.group(1) if match else None


def _write(path: Path, text: str, append: bool = False) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | os.O_NOFOLLOW
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "a" if append else "w", encoding="utf-8") as f:
        f.write(text)


class RunStore:
    """The files of one kernel's history in ``directory`` (made 0700 on the first write)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def for_kernel(cls, kernel: str, runtime_dir: str | os.PathLike[str] | None = None) -> RunStore:
        if runtime_dir is None:
            from jupyter_core.paths import jupyter_runtime_dir
            runtime_dir = jupyter_runtime_dir()
        return cls(Path(runtime_dir) / "mwnotebook" / f"runs-{kernel}")

    def remove_stale(self, keep_days: float = KEEP_DAYS) -> list[Path]:
        """Remove other kernels' histories (``runs-*`` beside this one, this user's) that nothing
        changed for ``keep_days``; returns what was removed."""
        removed: list[Path] = []
        limit = time.time() - keep_days * 86400
        try:
            siblings = [p for p in self.directory.parent.iterdir()
                        if p.name.startswith("runs-") and p != self.directory and p.is_dir()]
        except OSError:
            return removed
        for path in siblings:
            try:
                info = path.stat()
                newest = max([info.st_mtime, *(f.stat().st_mtime for f in path.iterdir())])
            except OSError:
                continue
            if info.st_uid == os.getuid() and newest < limit:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        if removed:
            log.info("mwnotebook: removed %d run histories untouched for %g days", len(removed), keep_days)
        return removed

    @property
    def index(self) -> Path:
        return self.directory / "runs.jsonl"

    def _ensure(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.directory.stat().st_uid != os.getuid():
            raise PermissionError(f"{self.directory} belongs to another user")

    def save(self, number: int, run: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]] | None) -> None:
        """Append run ``number``'s document; write its metric records too when given."""
        self._ensure()
        if metrics is not None:
            _write(self.directory / f"metrics-{number}.json",
                   json.dumps(list(metrics), separators=(",", ":"), default=str))
        line = json.dumps({"version": VERSION, "run": dict(run)}, separators=(",", ":"), default=str)
        _write(self.index, line + "\n", append=True)

    def load(self) -> list[dict[str, Any]]:
        """Every run's last document in the index, in number order; unreadable lines are skipped (logged)."""
        try:
            text = self.index.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("mwnotebook: cannot read the run history %s: %s", self.index, exc)
            return []
        runs: dict[int, dict[str, Any]] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            try:
                document = json.loads(line)
                if document.get("version") != VERSION:
                    continue
                run = document["run"]
                runs[int(run["number"])] = run
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("mwnotebook: %s line %d skipped: %s", self.index, number, exc)
        return [runs[n] for n in sorted(runs)]

    def load_metrics(self, number: int) -> list[dict[str, Any]]:
        try:
            rows = json.loads((self.directory / f"metrics-{number}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("mwnotebook: the metric records of run %d cannot be read: %s", number, exc)
            return []
        return [r for r in rows if isinstance(r, dict)]
