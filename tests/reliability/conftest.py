"""Fault injection on real two-worker TensorFlow clusters (the table: benchmarks/reliability_table.md).

Every scenario records one row -- scenario, limit, seconds to detection, seconds until the cell
failed, whether the next cell succeeded, orphan processes left -- with ``record``
(tests/_plugins/reliability_table.py) *before* it asserts. Faults come only from outside mwnotebook:
signals sent by the test, cells that raise or hang. The scenarios' shared cells and helpers are in
tests/reliability/scenario.py, the notebook kernel in testbed/notebook_kernel.py, process scans in
testbed/processes.py: a test imports those, never this file.
"""

from __future__ import annotations

import pathlib

import pytest

from testbed.modules import require

require("tensorflow", "pip install -e '.[tensorflow-cpu]'")

from testbed.notebook_kernel import Notebook  # noqa: E402 (after the optional-import check)

from .scenario import DATA  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


# ----------------------------------------------------------------------------- markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in pathlib.Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.reliability)


@pytest.fixture(scope="session")
def seed_code() -> str:
    return (DATA / "seed_train.py").read_text()


def _notebooks():
    made: list[Notebook] = []

    def make() -> Notebook:
        nb = Notebook()
        made.append(nb)
        reply, _, _ = nb.execute("%load_ext mwnotebook", timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
        return nb

    yield make
    for nb in made:
        nb.close()


@pytest.fixture
def notebook_factory():
    """Fresh notebook kernels with mwnotebook loaded, closed (and their workers checked) at the end."""
    yield from _notebooks()


@pytest.fixture(scope="module")
def shared_notebook():
    """One notebook kernel that several scenarios of a module use in turn."""
    for make in _notebooks():
        yield make()
