"""Spare a forked worker the walks over every loaded module that its kernel and TensorFlow make.

Walking ``sys.modules`` changes the reference count of every module object (and of its name or
``__file__`` string), and in a worker forked from a template (processes/worker_template.py) those
~4,600 modules' objects (TensorFlow, Keras, IPython) sit on pages shared with the template and the
other workers, one or two per page: each page written becomes the worker's private copy. Measured
with ``/proc/PID/pagemap`` against the template, in a child forked from a template-like process:
``tuple(sys.modules.values())`` plus each ``__file__`` copies 23 MiB, ``set(sys.modules.keys())``
10 MiB, both 28 MiB -- per worker, for pages whose contents did not otherwise change.

Three such walks run in every worker, none of them at the user's request:

- ``IPythonKernel.__init__`` (ipykernel) lists every module's ``__file__`` for its debugger;
- ``InteractiveShellApp.init_code`` (IPython) keeps ``set(sys.modules.keys())`` for
  ``%reset --aggressive``;
- TensorFlow's autograph, converting a ``tf.function`` (the first step of any training loop), looks
  for the modules whose ``__file__`` is the converted function's file (``inspect_utils``
  ``_fix_linecache_record``).

The template computes what they need once, before it forks (:func:`remember`); a forked worker's
kernel and autograph use that (:func:`install`), together with the modules imported since, read
from the end of ``sys.modules`` (:func:`_later_modules`). Each gets the same answer as its walk
would have given.

A kernel that was not forked from a template (an exec'd worker) has nothing remembered and walks as
usual: nothing of its is shared.
"""

from __future__ import annotations

import functools
import itertools
import logging
import sys
import types
from collections.abc import Iterable, Iterator, Set
from typing import Any

from mwnotebook.processes.runtime.after_import import patch_when_imported

log = logging.getLogger(__name__)

_template_files: list[str] | None = None
_template_names: frozenset[str] = frozenset()
_template_by_file: dict[str, list[types.ModuleType]] = {}
_template_modules: dict[str, Any] = {}


def _files(modules: Iterable[Any]) -> list[str]:
    """The expression ipykernel uses: the ``__file__`` of each module that has a non-empty one."""
    return [m.__file__ for m in modules if hasattr(m, "__file__") and m.__file__]


def remember() -> None:
    """In the template, after its imports and before ``gc.freeze``: list the loaded modules' files."""
    global _template_files, _template_names, _template_by_file, _template_modules
    loaded = sys.modules.copy()
    _template_modules = loaded
    _template_files = _files(loaded.values())
    _template_names = frozenset(loaded)
    by_file: dict[str, list[types.ModuleType]] = {}
    for module in loaded.values():
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and file:
            by_file.setdefault(file, []).append(module)
    _template_by_file = by_file


#: How many entries :func:`_later_modules` reads beyond the number of modules imported since the
#: template: room for template modules deleted from ``sys.modules`` since (each shortens the count).
TAIL_MARGIN = 64


def _later_modules() -> list[types.ModuleType]:
    """Modules imported since the template remembered its own: ``sys.modules`` keeps insertion order,
    so they are its last entries, read from the end (one C call) touching only about
    :data:`TAIL_MARGIN` of the template's entries. A template module imported again under its name
    (deleted, then imported) counts as later: its object is not the template's.

    Not ``gc.get_objects()`` (the first way): its list holds every tracked object, among them a tuple
    another thread may be building (``tuple(generator)`` grows it in place, which needs it unshared);
    held across a thread switch, that thread's resize fails with ``SystemError:
    Objects/tupleobject.c:927: bad argument to internal function`` (seen once in four runs of
    tests/remote/test_roles_ssh.py, in a --ps coordinator whose closure threads ran while autograph
    converted a function; tests/unit/test_module_walk_threads.py reproduces it).
    """
    count = len(sys.modules) - len(_template_names) + TAIL_MARGIN
    newest = list(itertools.islice(reversed(sys.modules.items()), max(count, 0)))
    return [module for name, module in newest if isinstance(module, types.ModuleType)
            and (name not in _template_names or _template_modules.get(name) is not module)]


def module_files() -> list[str]:
    """The files of all loaded modules, touching only the modules imported since the template remembered its own."""
    return [*(_template_files or ()), *_files(_later_modules())]


_later_cache: tuple[int, list[types.ModuleType]] = (-1, [])


def _later_modules_cached() -> list[types.ModuleType]:
    """:func:`_later_modules`, read again only when ``sys.modules`` changed size: autograph asks
    once per function it converts."""
    global _later_cache
    size = len(sys.modules)
    if _later_cache[0] != size:
        _later_cache = (size, _later_modules())
    return _later_cache[1]


def modules_with_file(file: str) -> list[types.ModuleType]:
    """The loaded modules whose ``__file__`` is ``file`` (what a walk over ``sys.modules`` would find)."""
    found = [m for m in _template_by_file.get(file, ()) if getattr(m, "__file__", None) == file]
    found += [m for m in _later_modules_cached() if getattr(m, "__file__", None) == file]
    return [m for m in found if sys.modules.get(m.__name__) is m]


class _LoadedNames(Set[str]):
    """``set(sys.modules.keys())`` without copying the template's names: its frozen set and the
    names of the modules imported since, both kept as they are."""

    def __init__(self, template: frozenset[str], later: set[str]) -> None:
        self._template = template
        self._later = later - template

    def __contains__(self, name: object) -> bool:
        return name in self._later or name in self._template

    def __iter__(self) -> Iterator[str]:
        yield from self._template
        yield from self._later

    def __len__(self) -> int:
        return len(self._template) + len(self._later)

    @classmethod
    def _from_iterable(cls, names: Iterable[str]) -> set[str]:  # type: ignore[override]
        return set(names)  # what ``current - snapshot`` gives: a plain set


class _ModulesWithoutCopy:
    """``sys.modules`` as a walking module sees it while the walk runs: all of it, except that
    ``copy()`` (ipykernel's walk) and ``keys()`` (IPython's) are empty; the caller then puts the
    walk's answer where it belongs."""

    def __init__(self, modules: dict[str, Any]) -> None:
        self._modules = modules

    def copy(self) -> dict[str, Any]:
        return {}

    def keys(self) -> list[str]:
        return []

    def __getitem__(self, name: str) -> Any:
        return self._modules[name]

    def __contains__(self, name: object) -> bool:
        return name in self._modules

    def __setitem__(self, name: str, module: Any) -> None:
        self._modules[name] = module

    def __delitem__(self, name: str) -> None:
        del self._modules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._modules, name)


class _SysWithoutWalk:
    """The ``sys`` module, with :class:`_ModulesWithoutCopy` for ``modules``."""

    def __init__(self, real: types.ModuleType) -> None:
        self._real = real
        self.modules = _ModulesWithoutCopy(real.modules)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def install() -> None:
    """In a forked worker, before ipykernel starts: the kernel, its shell application and autograph
    use what the template remembered (no-op when nothing was, e.g. in an exec'd worker)."""
    if _template_files is None:
        return
    patch_when_imported("ipykernel.ipkernel", _patch_kernel)
    patch_when_imported("IPython.core.shellapp", _patch_shell_app)
    patch_when_imported("tensorflow.python.autograph.pyct.inspect_utils", _patch_autograph)


def _without_walk(module: types.ModuleType, original: Any) -> Any:
    """``original`` (a function of ``module``) run with ``module.sys`` replaced by :class:`_SysWithoutWalk`."""

    @functools.wraps(original)
    def run(*args: Any, **kwargs: Any) -> Any:
        module.sys = _SysWithoutWalk(sys)  # type: ignore[attr-defined]
        try:
            return original(*args, **kwargs)
        finally:
            module.sys = sys  # type: ignore[attr-defined]

    run.mwnotebook_no_module_walk = True  # type: ignore[attr-defined]
    return run


def _walks_through_sys(module: types.ModuleType, owner: Any, name: str) -> bool:
    function = getattr(owner, name, None)
    if getattr(module, "sys", None) is not sys or function is None:
        log.debug("%s has no %s or no module-level sys; it walks as usual", module.__name__, name)
        return False
    return not getattr(function, "mwnotebook_no_module_walk", False)


def _patch_kernel(ipkernel: types.ModuleType) -> None:
    kernel_class = getattr(ipkernel, "IPythonKernel", None)
    if kernel_class is None or not _walks_through_sys(ipkernel, kernel_class, "__init__"):
        return
    construct = _without_walk(ipkernel, kernel_class.__init__)

    @functools.wraps(kernel_class.__init__)
    def __init__(self: Any, **kwargs: Any) -> None:
        construct(self, **kwargs)
        files = module_files()  # what the walk would have listed
        self._kernel_modules = files
        debugger = getattr(self, "debugger", None)
        if debugger is not None and hasattr(debugger, "kernel_modules"):
            debugger.kernel_modules = files

    __init__.mwnotebook_no_module_walk = True  # type: ignore[attr-defined]
    kernel_class.__init__ = __init__


def loaded_names() -> _LoadedNames:
    """The names in ``sys.modules`` (as a set), without copying the template's."""
    later = {m.__name__ for m in _later_modules() if sys.modules.get(m.__name__) is m}
    return _LoadedNames(_template_names, later)


def _patch_shell_app(shellapp: types.ModuleType) -> None:
    app_class = getattr(shellapp, "InteractiveShellApp", None)
    if app_class is None or not _walks_through_sys(shellapp, app_class, "init_code"):
        return
    init = _without_walk(shellapp, app_class.init_code)

    @functools.wraps(app_class.init_code)
    def init_code(self: Any) -> None:
        init(self)
        shell = getattr(self, "shell", None)
        if shell is not None and hasattr(shell, "_sys_modules_keys"):
            shell._sys_modules_keys = loaded_names()  # what %reset --aggressive keeps  # noqa: SLF001

    init_code.mwnotebook_no_module_walk = True  # type: ignore[attr-defined]
    app_class.init_code = init_code


def _patch_autograph(inspect_utils: types.ModuleType) -> None:
    fix = getattr(inspect_utils, "_fix_linecache_record", None)
    if fix is None or getattr(fix, "mwnotebook_no_module_walk", False):
        return
    inspect, linecache = inspect_utils.inspect, inspect_utils.linecache

    @functools.wraps(fix)
    def fix_linecache_record(obj: Any) -> None:
        # Autograph's own rule, without the walk: refresh the line cache of obj's file from each
        # loaded module defined in that file (its comparison `obj.__module__ is not m` is always
        # true, a name against a module, so every such module counts).
        if hasattr(obj, "__module__"):
            file = inspect.getfile(obj)
            for module in modules_with_file(file):
                linecache.updatecache(file, module.__dict__)

    fix_linecache_record.mwnotebook_no_module_walk = True  # type: ignore[attr-defined]
    setattr(inspect_utils, "_fix_linecache_record", fix_linecache_record)  # noqa: B010
