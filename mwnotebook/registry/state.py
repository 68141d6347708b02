"""The state files running clusters publish: where they live, how they are written and read.

One file per running cluster, ``<runtime dir>/mwnotebook/cluster-<id>.json`` (the directory 0700,
the file 0600), replaced atomically (a temporary file in the same directory, then ``os.replace``),
so a reader sees the old document or the new one, never half of one. A file another user wrote is
never read as one of ours (:func:`read_state` refuses it).
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mwnotebook.registry.document import VERSION as VERSION  # the document's format, read here too

log = logging.getLogger(__name__)
SUBDIR = "mwnotebook"
_ID = re.compile(r"^[0-9a-f]{8,32}$")


class NotYours(PermissionError):
    """A state file or socket that another user owns."""


def registry_dir(runtime_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory of the state files: ``<Jupyter runtime dir>/mwnotebook``."""
    if runtime_dir is None:
        from jupyter_core.paths import jupyter_runtime_dir
        runtime_dir = jupyter_runtime_dir()
    return Path(runtime_dir) / SUBDIR


def valid_id(cluster_id: str) -> bool:
    """A cluster id as :func:`new_id` makes them (the server takes ids from URLs)."""
    return bool(_ID.match(cluster_id))


def new_id() -> str:
    return os.urandom(6).hex()


def state_path(directory: Path, cluster_id: str) -> Path:
    if not valid_id(cluster_id):
        raise ValueError(f"not a cluster id: {cluster_id!r}")
    return directory / f"cluster-{cluster_id}.json"


def socket_path(directory: Path, cluster_id: str) -> Path:
    return directory / f"cluster-{cluster_id}.sock"


def ensure_dir(directory: Path) -> None:
    """Make the directory (0700) if needed; refuse one that another user owns."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.stat()
    if info.st_uid != os.getuid():
        raise NotYours(f"{directory} belongs to uid {info.st_uid}, not to this user ({os.getuid()})")
    if info.st_mode & 0o077:
        directory.chmod(0o700)


def write_state(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` with ``document`` atomically; the file is 0600 from its first byte."""
    fd, temp = tempfile.mkstemp(prefix=".cluster-", suffix=".tmp", dir=path.parent)  # 0600
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, separators=(",", ":"), default=str)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def read_state(path: Path) -> dict[str, Any] | None:
    """The document in ``path``; None if it vanished or is not a state document of this version.

    Raises :class:`NotYours` for a file another user owns (it is not read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, IsADirectoryError):
        return None
    except OSError as e:  # a symlink (ELOOP) is not a state file
        log.debug("skipping %s: %s", path, e)
        return None
    with os.fdopen(fd) as f:
        owner = os.fstat(f.fileno()).st_uid
        if owner != os.getuid():
            raise NotYours(f"{path} was written by uid {owner}, not by this user ({os.getuid()})")
        try:
            document = json.load(f)
        except ValueError:
            log.warning("%s is not a valid state file; skipped", path)
            return None
    if not isinstance(document, dict) or document.get("version") != VERSION:
        return None
    return document


def state_files(directory: Path) -> Iterator[Path]:
    """Every cluster's state file in ``directory``, in name order."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return
    for name in names:
        if name.startswith("cluster-") and name.endswith(".json") and valid_id(name[8:-5]):
            yield directory / name


def read_all(directory: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every readable state document of this user in ``directory`` (others' files are skipped)."""
    for path in state_files(directory):
        try:
            document = read_state(path)
        except NotYours:
            continue
        if document is not None:
            yield path, document
