"""One two-worker TensorFlow cluster shared by the TensorFlow tests that can honestly share it
(each cell creates its own strategy; a failure restarts the group, which later tests then reuse)."""

from __future__ import annotations

import pathlib

import pytest

from testbed.modules import require

require("tensorflow", "pip install -e '.[tensorflow-cpu]'")

from mwnotebook import Cluster  # noqa: E402 (after the optional-import check)

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="session")
def seed_code() -> str:
    return (DATA / "seed_train.py").read_text()


@pytest.fixture(scope="session")
def tf_cluster():
    with Cluster(workers=2, cpu=True, preload=True) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def exec_cluster():
    """Two workers started as fresh interpreters (no worker template, ``--no-template``): each
    import-time patch is then applied when the user's cell first imports TensorFlow."""
    with Cluster(workers=2, cpu=True, template=False) as cluster:
        yield cluster


@pytest.fixture(params=["forked", "exec"])
def any_cluster(request: pytest.FixtureRequest):
    """The shared forked cluster, then the exec'd one: behaviour tests run on both kinds of worker."""
    return request.getfixturevalue("tf_cluster" if request.param == "forked" else "exec_cluster")
