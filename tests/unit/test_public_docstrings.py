"""Every public name has a docstring: the API reference (docs/reference/, made by tools/docs_reference.py from
``__all__``) shows each, and a name without one would be an empty entry.

Public: what the ``__all__`` of ``mwnotebook``, ``mwnotebook.worker``, ``mwnotebook.dashboard``,
``mwnotebook.recipes`` and ``mwnotebook.profiling`` export, and the public methods and properties
those classes define themselves (inherited ones are documented where they are defined).
"""

from __future__ import annotations

import importlib
import inspect

import pytest

MODULES = ("mwnotebook", "mwnotebook.worker", "mwnotebook.dashboard", "mwnotebook.recipes",
           "mwnotebook.profiling")


def _public_names() -> list[tuple[str, str]]:
    return [(module, name) for module in MODULES for name in importlib.import_module(module).__all__]


def _own_members(cls: type) -> list[str]:
    """Public methods and properties the class's own body defines (not dataclass fields)."""
    return [name for name, value in vars(cls).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, (property, classmethod,
                                                                                               staticmethod)))]


def missing_docstrings(module: str, name: str) -> list[str]:
    obj = getattr(importlib.import_module(module), name)
    missing = [] if inspect.getdoc(obj) else [f"{module}.{name}"]
    if inspect.isclass(obj):
        for member in _own_members(obj):
            attr = vars(obj)[member]
            target = attr.__func__ if isinstance(attr, (classmethod, staticmethod)) else attr
            if not (target.__doc__ or "").strip():
                missing.append(f"{module}.{name}.{member}")
    return missing


@pytest.mark.parametrize("module, name", _public_names())
def test_public_name_has_a_docstring(module: str, name: str) -> None:
    assert missing_docstrings(module, name) == [], "give these a docstring (the API reference shows it)"


def test_the_check_sees_a_missing_docstring() -> None:
    """The check itself: a class whose method has no docstring is reported."""
    import types

    fake = types.ModuleType("fake_public")

    class Documented:
        """Has a docstring."""

        def run(self) -> None:
            pass

    fake.Documented = Documented  # type: ignore[attr-defined]
    fake.__all__ = ["Documented"]  # type: ignore[attr-defined]
    import sys

    sys.modules["fake_public"] = fake
    try:
        assert missing_docstrings("fake_public", "Documented") == ["fake_public.Documented.run"]
    finally:
        del sys.modules["fake_public"]
