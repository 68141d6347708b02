"""Standard-library-only files sent as source to hosts where mwnotebook is not installed (or copied
into exported jobs). They import nothing of the package but the shipped helpers (:data:`HELPERS`:
``owner_watch.py``), which :func:`bundle` sends along; :func:`source` reads one file as it is.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def source(filename: str) -> str:
    """The text of one shipped file, e.g. ``source("remote_agent.py")``."""
    return _HERE.joinpath(filename).read_text(encoding="utf-8")


def path(filename: str) -> Path:
    """Where one shipped file lies in the installed package (for copying it into an exported job)."""
    return _HERE / filename


#: Shipped files that other shipped files import (``from . import NAME``, falling back to ``import
#: NAME`` when run from source): :func:`bundle` sends them along as modules of that name.
#: (In import order: remote_kernel needs owner_watch.)
HELPERS = ("owner_watch", "remote_kernel", "stack_dump", "proc_usage")

_BUNDLE = """import sys as _mw_sys, types as _mw_types
for _mw_name, _mw_text in {helpers!r}:
    _mw_module = _mw_types.ModuleType(_mw_name)
    exec(compile(_mw_text, "<mwnotebook-" + _mw_name + ">", "exec"), _mw_module.__dict__)
    _mw_sys.modules[_mw_name] = _mw_module
del _mw_sys, _mw_types, _mw_name, _mw_text, _mw_module
exec(compile({main!r}, {filename!r}, "exec"), globals())
"""


def bundle(filename: str) -> str:
    """The source to send for one shipped file (say ``remote_agent.py``): run where mwnotebook is
    not installed, it first makes each of :data:`HELPERS` a module (``sys.modules["owner_watch"]``),
    then runs the file's own source in the same namespace (so its ``__name__`` is the runner's)."""
    helpers = tuple((name, source(f"{name}.py")) for name in HELPERS)
    label = f"<mwnotebook-{filename.removesuffix('.py').replace('_', '-')}>"
    return _BUNDLE.format(helpers=helpers, main=source(filename), filename=label)
