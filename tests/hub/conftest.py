"""The hub tier: one real JupyterHub for the whole tier (a session fixture; every module here runs on
one pytest-xdist process: tests/_plugins/run_groups.py), its students real system users made here and
removed at the end (testbed/hub.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from testbed.hub import HUB_VENV, Hub, Student, start_hub
from testbed.modules import require


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """JupyterHub with three students, ``MWNOTEBOOK_MAX_WORKERS=2`` for the class; the third's server
    culls its own idle kernels (testbed/hub.py ``INSIDE_CULLING``)."""
    if os.geteuid() != 0:
        pytest.skip("the hub tier makes system users and spawns their servers as them: run it as root")
    if not (HUB_VENV / "bin" / "jupyterhub-singleuser").exists():
        pytest.skip(f"no students' environment at {HUB_VENV}: bash tools/test.sh makes it "
                    "(or set MWNOTEBOOK_HUB_VENV)")
    if shutil.which("configurable-http-proxy") is None:
        pytest.skip("no configurable-http-proxy: npm install -g configurable-http-proxy (tools/test.sh does)")
    require("jupyterhub", "pip install -e '.[test]'")
    names = [f"mwst{os.getpid() % 100000}{letter}" for letter in "abc"]
    try:
        running = start_hub(tmp_path_factory.mktemp("hub"), names)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="session")
def students(hub: Hub) -> list[Student]:
    """The two students with the hub's plain settings."""
    return hub.students[:2]


@pytest.fixture(scope="session")
def self_culling_student(hub: Hub) -> Student:
    """The student whose server culls its own idle kernels."""
    return hub.students[2]
