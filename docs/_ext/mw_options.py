"""The options of an argparse parser as table rows, for the reference pages (tools/docs_reference.py).

The parser is built by calling the named function (``mwtrain_parser``, the command line's
``build_parser``), so the page is made from the same object the magic and the command parse with and
cannot drift from the code. ``load_parser(target, "run")`` gives one subcommand of a parser with
subcommands.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any


def load_parser(target: str, subcommand: str | None = None) -> argparse.ArgumentParser:
    """The parser ``module:function`` returns, or its ``subcommand``'s."""
    module_name, _, func_name = target.partition(":")
    parser = getattr(importlib.import_module(module_name), func_name)()
    if not isinstance(parser, argparse.ArgumentParser):
        raise TypeError(f"{target} returned {type(parser).__name__}, not an ArgumentParser")
    if subcommand is None:
        return parser
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of its actions
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001 - nor of its subparsers
            if subcommand in action.choices:
                return action.choices[subcommand]
    raise ValueError(f"{target} has no subcommand {subcommand!r}")


def option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    """(option, argument, help with default and choices) for every documented action."""
    rows = []
    for action in parser._actions:  # noqa: SLF001 - see load_parser
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001 - see load_parser
            for choice in action._choices_actions:  # noqa: SLF001 - the subcommands' help lines
                rows.append((choice.dest, "", choice.help or ""))
            continue
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):  # noqa: SLF001
            continue
        names = ", ".join(action.option_strings) or action.dest
        if action.nargs == 0:
            arg = ""
        elif action.choices is not None:
            arg = "{" + ",".join(str(c) for c in action.choices) + "}"
        else:
            arg = str(action.metavar or action.dest.upper())
        if action.nargs == "?" and arg:
            arg = f"[{arg}]"
        text = action.help or ""
        if "%(" in text:
            text = text % {**vars(action), "prog": parser.prog}
        default: Any = action.default
        said = text.lower()
        if (action.option_strings and action.nargs != 0 and default not in (None, [], "", argparse.SUPPRESS)
                and "default" not in said):
            text += f" (default: {default})"
        if action.option_strings and action.nargs == "?" and action.const not in (None, ""):
            text += f" (alone: {action.const})"
        if action.option_strings and isinstance(action, argparse._AppendAction) and "repeatable" not in said:  # noqa: SLF001
            text += " (repeatable)"
        rows.append((names, arg, text))
    return rows
