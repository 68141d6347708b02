"""Import an optional module for a test: skip when it is not installed, fail when it is broken.

``pytest.importorskip`` skips on any ``ImportError``, so a TensorFlow wheel that cannot load its
numpy or libstdc++ would quietly skip every TensorFlow test. Here only a ``ModuleNotFoundError`` for
the module itself (or one of its parent packages) skips; anything else raised while importing it is
the test's failure.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


def require(name: str, install: str) -> ModuleType:
    """``import name`` or skip saying ``install`` (the command that installs it)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        parents = {".".join(name.split(".")[: i + 1]) for i in range(name.count(".") + 1)}
        if exc.name not in parents:
            raise  # the module is there but something it imports is missing: broken, not absent
        pytest.skip(f"{name} is not installed: {install}", allow_module_level=True)
