"""Write the reference pages docs/reference/*.md as plain Markdown, made from the code.

Each page is readable as it is on GitHub (no directive to expand) and is built by Sphinx as any other
page. The Python API pages come from the docstrings and signatures of each module's ``__all__``, the
options pages from the argparse parsers the magics and the command parse with
(docs/_ext/mw_options.py reads them), the layout page from each package's docstring
(tools/docs_layout.py). The pages are committed; tests/unit/test_docs_reference.py fails when one no
longer matches what this writes from the code (run this again and commit).

Usage: python tools/docs_reference.py [--check]   (--check: write nothing, exit 1 if a page is stale)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
sys.path.insert(0, str(ROOT / "tools"))

#: Columns the options' usage lines are wrapped to (argparse's own default in an 80-column terminal).
USAGE_WIDTH = 78

GENERATED = "<!-- Made by tools/docs_reference.py from the code; do not edit (run it again). -->"

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|exc|data|obj|const):`([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _role_text(match: re.Match[str]) -> str:
    target = match.group(1)
    named = re.fullmatch(r"(.+?)\s*<(.+)>", target)
    if named:
        return f"`{named.group(1)}`"
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown_of(doc: str) -> str:
    """A reST docstring as Markdown: ``x`` and :role:`x` become `x`, a ``::`` block a fenced block."""
    # ``literal`` first over the whole text: a literal may run over a line break
    lines = _LITERAL.sub(lambda m: f"`{m.group(1)}`", inspect.cleandoc(doc)).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            head = line.rstrip()[:-2].rstrip()
            if head:
                out.append(_inline(head) + ":")
            stripped = line.lstrip()
            marker = re.match(r"(\d+\.|[-*])\s+", stripped)
            indent = " " * (len(line) - len(stripped) + (marker.end() if marker else 0))
            i += 1
            block: list[str] = []
            while i < len(lines) and not lines[i].strip():
                i += 1
            depth = len(lines[i]) - len(lines[i].lstrip()) if i < len(lines) else 0
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) >= depth):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            code = textwrap.dedent("\n".join(block)).strip("\n").splitlines()
            out += ["", indent + "```python", *(indent + c if c else "" for c in code), indent + "```", ""]
            continue
        out.append(_inline(line))
        i += 1
    return "\n".join(out).strip()


def _inline(text: str) -> str:
    return _ROLE.sub(_role_text, _LITERAL.sub(lambda m: f"`{m.group(1)}`", text))


def _annotation(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    return value if isinstance(value, str) else inspect.formatannotation(value)


def signature_of(obj: Callable[..., Any], name: str, *, drop_self: bool = False) -> str:
    """``name(a: int = 1, *, b: str) -> X`` with the annotations as the source writes them."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name}(...)"
    parts: list[str] = []
    star_done = False
    params = list(sig.parameters.values())
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
        stars = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text = stars + p.name
        annotation = _annotation(p.annotation)
        if annotation:
            text += f": {annotation}"
        if p.default is not p.empty:
            default = _default_text(obj, p.name, p.default)
            text += f" = {default}" if annotation else f"={default}"
        parts.append(text)
    result = _annotation(sig.return_annotation)
    return f"{name}({', '.join(parts)})" + (f" -> {result}" if result else "")


def _default_text(obj: Any, name: str, default: Any) -> str:
    """A default as the source means it: a dataclass field's ``default_factory`` shown by what it makes."""
    if repr(default) == "<factory>" and dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            if f.name == name and f.default_factory is not dataclasses.MISSING:
                return repr(f.default_factory())
    return repr(default)


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment above each field of a class body, by field name."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    comments: dict[str, str] = {}
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above: list[str] = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#:"):
                above.insert(0, lines[row].strip()[2:].strip())
                row -= 1
            if above:
                comments[node.target.id] = " ".join(above)
    return comments


def _own_members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties the class's own body defines, in source order."""
    return [(name, value) for name, value in vars(cls).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, (property, classmethod,
                                                                                               staticmethod)))]


def _doc(obj: Any) -> str:
    return markdown_of(inspect.getdoc(obj) or "")


def class_entry(module: str, name: str, cls: type) -> list[str]:
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    signature = signature_of(cls, name, drop_self=True).removesuffix(" -> None")
    out = [f"### `{name}`", "", "```python", f"class {signature}", "```", ""]
    if bases:
        out += [f"Bases: {', '.join(f'`{b}`' for b in bases)}", ""]
    own_doc = cls.__dict__.get("__doc__")
    if own_doc and not (dataclasses.is_dataclass(cls) and own_doc.startswith(f"{cls.__name__}(")):
        out += [markdown_of(own_doc), ""]
    if dataclasses.is_dataclass(cls):
        comments = field_comments(cls)
        fields = [f for f in dataclasses.fields(cls) if not f.name.startswith("_")]
        if fields:
            out += ["Fields:", ""]
            for f in fields:
                note = comments.get(f.name, "")
                out.append(f"- `{f.name}: {_annotation(f.type)}`" + (f": {_inline(note)}" if note else ""))
            out.append("")
    for member, value in _own_members(cls):
        if isinstance(value, property):
            out += [f"#### `{name}.{member}` (property)", "", _doc(value.fget), ""]
            continue
        func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        kind = "classmethod " if isinstance(value, classmethod) else "staticmethod " if isinstance(
            value, staticmethod) else ""
        out += [f"#### `{name}.{member}`", "", "```python",
                kind + signature_of(func, member, drop_self=not isinstance(value, staticmethod)), "```", "",
                _doc(func), ""]
    return out


def function_entry(name: str, func: Callable[..., Any]) -> list[str]:
    return [f"### `{name}`", "", "```python", signature_of(func, name), "```", "", _doc(func), ""]


def api_section(module_name: str, *, heading: str | None = None) -> list[str]:
    """Every name of the module's ``__all__``: classes first, then functions, each group sorted."""
    module = importlib.import_module(module_name)
    names: list[str] = list(module.__all__)
    objects = {name: getattr(module, name) for name in names}
    classes = sorted(n for n in names if inspect.isclass(objects[n]))
    functions = sorted(n for n in names if n not in classes and callable(objects[n]))
    constants = sorted(n for n in names if n not in classes and n not in functions)
    out = [heading, ""] if heading else []
    if classes:
        out += ["## Classes", ""]
        for name in classes:
            out += class_entry(module_name, name, objects[name])
    if functions:
        out += ["## Functions", ""]
        for name in functions:
            out += function_entry(name, objects[name])
    if constants:
        out += ["## Constants", ""]
        notes = _module_constant_comments(module)
        for name in constants:
            out += [f"### `{name}`", "", f"`{name} = {objects[name]!r}`" + (
                f": {_inline(notes[name])}" if name in notes else ""), ""]
    return out


def _module_constant_comments(module: Any) -> dict[str, str]:
    source = inspect.getsource(module).splitlines()
    notes: dict[str, str] = {}
    for row, line in enumerate(source):
        match = re.match(r"([A-Z_][A-Z0-9_]*)\s*(?::[^=]+)?=", line)
        if not match:
            continue
        above: list[str] = []
        up = row - 1
        while up >= 0 and source[up].startswith("#:"):
            above.insert(0, source[up][2:].strip())
            up -= 1
        if above:
            notes[match.group(1)] = " ".join(above)
    return notes


def options_section(target: str, subcommand: str | None = None) -> list[str]:
    """The options of an argparse parser as a Markdown table (docs/_ext/mw_options.py reads them)."""
    from mw_options import load_parser, option_rows

    parser = load_parser(target, subcommand)
    # A fixed width: argparse wraps the usage to the terminal's (COLUMNS), and the page must not
    # depend on where it is made.
    parser.formatter_class = functools.partial(parser.formatter_class, width=USAGE_WIDTH)
    usage = parser.format_usage().strip().removeprefix("usage: ")
    out = ["```text", usage, "```", ""]
    if parser.description:
        out += [parser.description, ""]
    out += ["| option | argument | what it does |", "|---|---|---|"]
    for option, arg, text in option_rows(parser):
        cells = [f"`{option}`", f"`{arg}`" if arg else "", " ".join(text.split())]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return [*out, ""]


def _page(title: str, intro: str, body: list[str], outro: str = "") -> str:
    lines = [f"# {title}", "", GENERATED, "", intro.strip(), "", *body]
    if outro:
        lines += [outro.strip(), ""]
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


API_INTRO = """
What `import mwnotebook` exports (its `__all__`), made from the docstrings. `Cluster` (blocking)
and `AsyncCluster` (asyncio) are the machinery under the magics: start, run, interrupt, restart and
stop a group of worker kernels. A failed cell raises a `ClusterRunError` subclass whose `failures`
list puts the cause first; every error mwnotebook raises on purpose is a `MWNotebookError`.

```python
from mwnotebook import Cluster

with Cluster(workers=2, cpu=True) as cluster:
    result = cluster.run(open("train.py").read(), timeout=300)
    print(result.stdout(0), result.stdout(1))
    print(cluster.tf_configs)
```

The other pages of the Python API: [inside the workers](worker.md) (`mwnotebook.worker`), [the
chart and its data](dashboard.md) (`mwnotebook.dashboard`), [recipes](recipes.md)
(`mwnotebook.recipes`) and [profiling](profiling.md) (`mwnotebook.profiling`).
"""

WORKER_INTRO = """
What cell code running in a worker kernel imports, as `import mwnotebook.worker as mw`; made from the
docstrings of its `__all__`. The [worker API guide](../guide/worker-api.md) shows them in use.
"""

DASHBOARD_INTRO = """
The live chart and status table under a `%%mwtrain` cell, and the metrics they collected as plain
data. `last_dashboard()` is the chart of the last `%%mwtrain` cell that drew one, from any later
cell: `last_dashboard().dataframe()` has every metric record (lessons 02 and 03 use it). The
[chart guide](../guide/output-and-chart.md) shows the chart; the same records are in `mw_result`
([magics page](magics.md#mw_result-what-a-cell-leaves)).
"""

RECIPES_INTRO = """
`mwnotebook.recipes`: the global batch, the linear learning-rate scaling with a real warm-up, and the
input pipeline in the right order, as functions. "The seed" is what the project started from: lesson
01's two-worker program and a performance recipe stack, which this module follows (see the
[glossary](../guide/concepts.md#glossary)). The [worker API guide](../guide/worker-api.md) shows them in use.
"""

PROFILING_INTRO = """
`mwnotebook.profiling`: how input-bound a training step is, and the single-device checklist (mixed
precision, XLA, batch size), measured in a plain process or inside each worker. "The seed" is what
the project started from, its performance recipes included ([glossary](../guide/concepts.md#glossary));
lesson 05 uses this module.
"""

MAGICS_INTRO = """
The tables below are made from the argparse parsers the magics parse their lines with
(`mwnotebook/frontend/notebook/magics.py`, `mwnotebook/config/options.py`): they list exactly the
options the code accepts. `%load_ext mwnotebook` registers every magic.
"""

def _table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


MW_RESULT_ROWS = [
    ("`mw_result.stdout(i)`, `mw_result.stderr(i)`",
     "worker `i`'s whole output of the cell (`attempt=n`: one attempt's, with `--max-restarts`)"),
    ("`mw_result.metrics`",
     "every metric record the workers reported (`worker`, `step`, `epoch`, the metrics; `attempt` after a restart)"),
    ("`mw_result.metrics_frame()`", "the same records as a pandas DataFrame"),
    ("`mw_result.log_paths[i]`", "worker `i`'s output log: every line its cells printed, late lines included"),
    ("`mw_result.restarts`, `mw_result.attempts`",
     "each restart (cause, worker, time) and how many times the cell ran"),
    ("`mw_result.elapsed`, `mw_result.ok`",
     "the cell's seconds on the cluster, and whether every worker's cell ended with status ok"),
]

ENV_ROWS = [
    ("`MWNOTEBOOK_MAX_RESTARTS=K`", "notebook (`%env`), command", "the default of `--max-restarts`"),
    ("`MWNOTEBOOK_TEMPLATE=0`", "notebook",
     "no worker template: every worker a fresh interpreter (as `--no-template`)"),
    ("`MWNOTEBOOK_SHOW_TF_STARTUP=1`", "notebook, command",
     "TensorFlow's start-up notices shown (as `--show-tf-startup`)"),
    ("`MWNOTEBOOK_SSH_CONFIG=FILE`", "notebook, command", "the SSH config file, as `ssh -F FILE`"),
    ("`MWNOTEBOOK_AUTO_KERAS_CALLBACK=0`", "workers (`--env`)",
     "no automatic live-curve callback in `fit` and no global batch logs (as `mw.auto_keras_callback(False)`)"),
    ("`MWNOTEBOOK_SKIP_JS=1`", "`pip install`",
     "install without building the chart's JavaScript (the chart is then an SVG picture updated in place)"),
    ("`MWNOTEBOOK_WORKER=1`, `MWNOTEBOOK_WORKER_INDEX`, `MWNOTEBOOK_NUM_WORKERS`", "set in each worker",
     "this kernel is a worker, its index, the number of workers"),
]

MAGICS_OUTRO = f"""
## `mw_result`: what a cell leaves

After a `%%mwtrain` cell finishes on every worker, the notebook has a variable `mw_result`: that
cell's `RunResult` ([API](api.md#runresult)), the same object `Cluster.run` returns. A cell that
fails raises its error instead and leaves `mw_result` as the last finished cell set it.

{_table(("use", "what it gives"), MW_RESULT_ROWS)}

The chart's own copy of the records is `mwnotebook.dashboard.last_dashboard().dataframe()`
([dashboard](dashboard.md)).

## GPUs and start-up notices

- `--gpus-per-worker K` gives each local worker K GPUs of its own: `CUDA_VISIBLE_DEVICES` is 0..K-1
  for worker 0, K..2K-1 for worker 1, and so on; asking for more than are visible is an error before
  anything starts. `--cpu` hides every GPU (`CUDA_VISIBLE_DEVICES=-1`).
- `--show-tf-startup` shows TensorFlow's start-up notices (CPU features, oneDNN, "Could not find cuda
  drivers", cuInit), which are hidden by default, also in `mwnotebook run`.

## Environment variables

{_table(("variable", "where", "what it does"), ENV_ROWS)}
"""

CLI_INTRO = """
Made from the command's own parser (`mwnotebook/frontend/cli/command.py`). The
[command-line guide](../guide/command-line.md) says what a run prints and its exit statuses.
"""


def pages() -> dict[str, str]:
    """Every generated page: file name -> its text."""
    from docs_layout import layout_page

    magics = "mwnotebook.frontend.notebook.magics"
    cli = "mwnotebook.frontend.cli.command:build_parser"
    return {
        "api.md": _page("Python API: `mwnotebook`", API_INTRO, api_section("mwnotebook")),
        "worker.md": _page("Inside the workers: `mwnotebook.worker`", WORKER_INTRO, api_section("mwnotebook.worker")),
        "dashboard.md": _page("The chart and its data: `mwnotebook.dashboard`", DASHBOARD_INTRO,
                              [markdown_of(importlib.import_module("mwnotebook.dashboard").__doc__ or ""), "",
                               *api_section("mwnotebook.dashboard")]),
        "recipes.md": _page("Recipes: `mwnotebook.recipes`", RECIPES_INTRO,
                            [markdown_of(importlib.import_module("mwnotebook.recipes").__doc__ or ""), "",
                             *api_section("mwnotebook.recipes")]),
        "profiling.md": _page("Profiling: `mwnotebook.profiling`", PROFILING_INTRO,
                              [markdown_of(importlib.import_module("mwnotebook.profiling").__doc__ or ""), "",
                               *api_section("mwnotebook.profiling")]),
        "magics.md": _page("Magics: `%%mwtrain`, `%mwcluster`, `%mwruns` and `%mwprofile`", MAGICS_INTRO,
                           ["## `%%mwtrain`", "", *options_section(f"{magics}:mwtrain_parser"),
                            "## `%mwcluster`", "", *options_section(f"{magics}:mwcluster_parser"),
                            "## `%mwruns`", "", *options_section(f"{magics}:mwruns_parser"),
                            "## `%mwprofile`", "", *options_section(f"{magics}:mwprofile_parser")], MAGICS_OUTRO),
        "cli.md": _page("Command line: `mwnotebook`", CLI_INTRO,
                        [*options_section(cli), "## `mwnotebook run`", "", *options_section(cli, "run"),
                         "## `mwnotebook export`", "", *options_section(cli, "export")]),
        "layout.md": layout_page(),
    }


def stale_pages() -> list[str]:
    """The committed pages that differ from what the code makes now (missing ones included)."""
    return sorted(name for name, text in pages().items()
                  if not (REFERENCE / name).exists() or (REFERENCE / name).read_text() != text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    from docs_layout import contributing_is_stale, write_contributing

    if args.check:
        stale = stale_pages()
        for name in stale:
            print(f"docs/reference/{name} is stale: run python tools/docs_reference.py", file=sys.stderr)
        if contributing_is_stale():
            print("CONTRIBUTING.md's tier table is stale: run python tools/docs_reference.py", file=sys.stderr)
        return 1 if stale or contributing_is_stale() else 0
    for name, text in pages().items():
        (REFERENCE / name).write_text(text)
        print(f"docs/reference/{name}: {len(text.splitlines())} lines")
    write_contributing()
    print("CONTRIBUTING.md: the tier table")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
