"""The share of the package's lines that mypy checks strictly, read from pyproject.toml.

A module counts as strict when every per-module flag of ``mypy --strict`` is on for it: the
global ``[tool.mypy]`` table (``strict = true`` turns them all on) with the
``[[tool.mypy.overrides]]`` that match the module applied over it (wildcard patterns first, exact
names last, as mypy ranks them). Lines are physical lines of the ``.py`` files.

    python3 tools/strict_share.py [REPO]        # REPO defaults to the current directory
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as a package
    import tomli as tomllib

#: The per-module flags of ``mypy --strict`` (the others are global-only). The repository's
#: strict list before ``strict = true`` named these nine; ``disallow_subclassing_any`` (also in
#: ``--strict``, on globally since) is left out so that the share is comparable across versions.
STRICT_FLAGS = (
    "disallow_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_calls",
    "disallow_untyped_decorators", "disallow_any_generics",
    "check_untyped_defs", "warn_return_any", "no_implicit_reexport", "strict_equality",
)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _matches(pattern: str, module: str) -> bool:
    if pattern.endswith(".*"):
        base = pattern[:-2]
        return module == base or module.startswith(base + ".")
    return module == pattern


def _flags(options: dict[str, Any], base: dict[str, bool]) -> dict[str, bool]:
    flags = dict(base)
    if options.get("strict"):
        flags = dict.fromkeys(STRICT_FLAGS, True)
    for name in STRICT_FLAGS:
        if name in options:
            flags[name] = bool(options[name])
    if "implicit_reexport" in options:
        flags["no_implicit_reexport"] = not options["implicit_reexport"]
    return flags


def is_strict(module: str, mypy: dict[str, Any]) -> bool:
    flags = _flags(mypy, dict.fromkeys(STRICT_FLAGS, False))
    overrides = mypy.get("overrides", [])
    matching = []
    for override in overrides:
        patterns = override["module"] if isinstance(override["module"], list) else [override["module"]]
        for pattern in patterns:
            if _matches(pattern, module):
                matching.append((not pattern.endswith(".*"), pattern.count("."), override))
    for _exact, _depth, override in sorted(matching, key=lambda m: (m[0], m[1])):
        flags = _flags(override, flags)
    return all(flags.values())


def strict_share(root: Path) -> dict[str, Any]:
    """Strict and total lines of the package's modules, and the modules not strict."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    mypy = config.get("tool", {}).get("mypy", {})
    strict_lines = total_lines = 0
    relaxed: list[str] = []
    for path in sorted((root / "mwnotebook").rglob("*.py")):
        lines = len(path.read_text().splitlines())
        module = _module_name(path, root)
        total_lines += lines
        if is_strict(module, mypy):
            strict_lines += lines
        else:
            relaxed.append(module)
    return {
        "strict_lines": strict_lines,
        "total_lines": total_lines,
        "strict_share": round(strict_lines / total_lines, 3) if total_lines else 0.0,
        "modules_not_strict": len(relaxed),
        "not_strict": relaxed,
    }


if __name__ == "__main__":
    result = strict_share(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
