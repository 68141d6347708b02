"""``.. mw-api:: mwnotebook`` documents every name in a module's ``__all__`` with autodoc.

The list comes from ``__all__`` when the page is built, so a name added to the public API gets its
entry without editing the page (tests/unit/test_public_docstrings.py checks each has a docstring).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


def autodoc_lines(module_name: str) -> list[str]:
    """One autodoc directive per public name, classes first, then functions, each group sorted."""
    module = importlib.import_module(module_name)
    names: list[str] = list(module.__all__)
    objects = {name: getattr(module, name) for name in names}
    classes = sorted(n for n in names if inspect.isclass(objects[n]))
    functions = sorted(n for n in names if n not in classes)
    lines = []
    for name in classes:
        lines += [f".. autoclass:: {module_name}.{name}", "   :members:", ""]
    for name in functions:
        lines += [f".. autofunction:: {module_name}.{name}", ""]
    return lines


class ApiDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(autodoc_lines(self.arguments[0]), source="mw-api"), container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("mw-api", ApiDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
