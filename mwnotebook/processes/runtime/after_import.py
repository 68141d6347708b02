"""Patch a module once it is imported: now if it already is, else right after its first import.

A worker changes a few third-party modules (TensorFlow's log level, tf_keras ``Model.fit``,
``tqdm.notebook``, the collective strategy constructors) without importing them early: importing
TensorFlow costs seconds and must not happen before the user's cell asks for it. A worker forked
from a template (``worker_template.py``) has TensorFlow and tf_keras loaded already, so the patch
must then be applied at once; an exec'd worker gets a one-shot meta-path finder that runs the
patch right after the module's own code has executed, before the importer sees the module.

A patch that fails is logged (with the module's name) and never breaks the user's import.
Patches should be idempotent: a module may be patched by a template and again by its worker.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

log = logging.getLogger(__name__)

Patch = Callable[[ModuleType], None]


def _apply(name: str, patch: Patch, module: ModuleType) -> None:
    try:
        patch(module)
    except Exception:
        log.warning("mwnotebook could not patch %s with %s", name, getattr(patch, "__name__", patch), exc_info=True)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """One-shot finder: wraps the loader of ``name`` so that ``patch`` runs after the module executes."""

    def __init__(self, name: str, patch: Patch) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # one shot; the real finders below resolve the spec
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            _apply(fullname, self.patch, module)

        spec.loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec


def patch_when_imported(name: str, patch: Patch) -> None:
    """Call ``patch(module)`` for module ``name`` now if it is imported, else right after its first import.

    Installing the same ``(name, patch)`` twice before the import adds one finder only.
    """
    module = sys.modules.get(name)
    if module is not None:
        _apply(name, patch, module)
        return
    for finder in sys.meta_path:
        if isinstance(finder, _PatchAfterImport) and finder.name == name and finder.patch is patch:
            return
    sys.meta_path.insert(0, _PatchAfterImport(name, patch))


def marked(func: object, marker: str) -> bool:
    """True if ``func`` or any function it wraps (``__wrapped__``) carries ``marker``: two patches
    of one method (collective_keys.py and ps_guard.py both wrap the strategy constructor) stack, and
    each must still find its own layer to stay idempotent."""
    seen = 0
    while func is not None and seen < 32:
        if getattr(func, marker, False):
            return True
        func, seen = getattr(func, "__wrapped__", None), seen + 1
    return False


_F = TypeVar("_F", bound=Callable[..., Any])


def stacked_on(original: Callable[..., Any], wrapper: _F, marker: str) -> _F:
    """Make ``wrapper`` a layer over ``original`` that :func:`marked` finds by ``marker``: it keeps
    ``original``'s docstring (what ``help()`` shows the user) and points at it with ``__wrapped__``."""
    setattr(wrapper, marker, True)
    wrapper.__doc__ = original.__doc__
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def pending(name: str) -> bool:
    """True while a patch for ``name`` waits for its import (for tests and diagnostics)."""
    return any(isinstance(f, _PatchAfterImport) and f.name == name for f in sys.meta_path)
