"""The worker's one "patch a module once it is imported" helper, with real imports from a temp dir."""

from __future__ import annotations

import importlib
import logging
import sys
import uuid

import pytest

from mwnotebook.processes.runtime import after_import


@pytest.fixture()
def package(tmp_path, monkeypatch):
    """A fresh importable package ``name`` with a module ``name.engine.training`` (never imported yet)."""
    name = "mwpatch_" + uuid.uuid4().hex[:8]
    (tmp_path / name / "engine").mkdir(parents=True)
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "engine" / "__init__.py").write_text("")
    (tmp_path / name / "engine" / "training.py").write_text("VALUE = 1\nPATCHES = []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]
    sys.meta_path[:] = [f for f in sys.meta_path if not (getattr(f, "name", "") or "").startswith(name)]


def _mark(label):
    def patch(module):
        module.PATCHES.append(label)
    return patch


def test_patches_right_after_the_first_import_then_leaves(package):
    target = package + ".engine.training"
    first = _mark("first")
    after_import.patch_when_imported(target, first)
    after_import.patch_when_imported(target, first)  # the same patch again: one finder
    assert after_import.pending(target)
    assert sum(getattr(f, "name", None) == target for f in sys.meta_path) == 1
    module = importlib.import_module(target)
    assert module.VALUE == 1 and module.PATCHES == ["first"]
    assert not after_import.pending(target)


def test_patches_at_once_when_already_imported(package):
    """A worker forked from a template: the module is in sys.modules before the hook is installed."""
    target = package + ".engine.training"
    module = importlib.import_module(target)
    after_import.patch_when_imported(target, _mark("now"))
    assert module.PATCHES == ["now"]
    assert not after_import.pending(target)


def test_two_patches_of_one_module_both_run_in_order(package):
    target = package + ".engine.training"
    after_import.patch_when_imported(target, _mark("a"))
    after_import.patch_when_imported(target, _mark("b"))
    assert importlib.import_module(target).PATCHES == ["a", "b"]


def test_a_failing_patch_is_logged_and_the_import_still_works(package, caplog):
    target = package + ".engine.training"

    def broken(module):
        raise RuntimeError("no such attribute in this version")

    after_import.patch_when_imported(target, broken)
    after_import.patch_when_imported(target, _mark("after"))
    with caplog.at_level(logging.WARNING, logger=after_import.__name__):
        module = importlib.import_module(target)
    assert module.PATCHES == ["after"]
    assert any(target in r.getMessage() and "broken" in r.getMessage() for r in caplog.records)


def test_a_missing_module_is_left_to_the_import_system(package):
    target = package + ".engine.nothing_here"
    after_import.patch_when_imported(target, _mark("never"))
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(target)
    assert not after_import.pending(target)
