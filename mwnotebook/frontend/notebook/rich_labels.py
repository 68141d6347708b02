"""Whose a worker's rich output is (a figure, an HTML table), in every front end.

A display bundle holds one object in several formats and a front end shows exactly one of them,
the richest it can render: JupyterLab, Notebook 7, VS Code, nbconvert's HTML and GitHub's viewer
show ``image/png`` or ``text/html`` and never the bundle's ``text/plain``. So a ``[worker i]`` put
into ``text/plain`` (enough for text) is invisible next to a figure. The ways to put it elsewhere:

* inside the picture: would mean re-encoding every image, and SVG, plotly JSON or any other mime
  type would each need their own trick;
* inside the HTML (a wrapper or a prefix): covers HTML only, and GitHub / nbconvert sanitise
  what they render;
* **a small display of its own right before the output** (chosen): a ``display_data`` whose
  bundle is the label as ``text/html``, ``text/markdown`` and ``text/plain``. Every front end
  renders at least one of those three (text-only ones print the plain text), it is an ordinary
  output, so it is saved in the ``.ipynb`` like any other and shown by every viewer of the file,
  and the output it names is left exactly as the worker sent it.

The label display has a display id of its own. When another worker sends an identical rich output
(:class:`~mwnotebook.frontend.text.grouping.DisplayGroups`), that output is not shown again: the
first one's label is updated in place to name both (``[all N workers]`` once all sent it), so no
image is sent twice. Outputs that carry the worker's own display id (to be updated later) are not
merged: each worker's updates must reach its own copy.

Bundles with nothing but ``text/plain`` need no label display: their text is labelled, as before.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from mwnotebook.frontend.text.grouping import (
    NO_NAMES,
    DisplayGroups,
    Grouped,
    WorkerNames,
    with_plain_label,
    worker_label,
    workers_label,
)

#: ``show(bundle, metadata, transient)``: show (or, with ``transient["update"]``, replace) a display.
ShowFn = Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], None]

#: The class of a label display's HTML (tests and user style sheets find labels by it).
LABEL_CLASS = "mw-rich-label"


def is_rich(data: dict[str, Any]) -> bool:
    """Whether a front end would show something other than ``text/plain`` for ``data``."""
    return any(mime != "text/plain" for mime in data)


def label_bundle(label: str, workers: list[int]) -> dict[str, Any]:
    """The label display for the output right after it: ``[worker 1]``, ``[all 2 workers]``."""
    text = label.strip()
    markdown = "**" + text.replace("[", "\\[").replace("]", "\\]") + "**"
    return {
        "text/plain": text,
        "text/markdown": markdown,
        "text/html": (f"<div class='{LABEL_CLASS}' data-workers='{' '.join(map(str, workers))}' "
                      f"style='font-family:monospace;font-weight:bold;color:#555;margin:2px 0'>"
                      f"{html.escape(text)}</div>"),
    }


class RichOutputLabels:
    """Shows workers' rich outputs, each after its label display, identical ones once."""

    def __init__(self, num_workers: int, prefix: str, show: ShowFn, names: WorkerNames = NO_NAMES) -> None:
        self.num_workers = num_workers
        self.names = names
        self._prefix = prefix
        self._show = show
        self._groups = DisplayGroups(num_workers, names)

    def display(self, worker: int, data: dict[str, Any], metadata: dict[str, Any],
                transient: dict[str, Any]) -> None:
        """A worker's ``display_data`` (its own display id, if any, already made unique in ``transient``)."""
        if not is_rich(data):
            self._show(with_plain_label(data, worker_label(worker, self.names)), metadata, transient)
            return
        if "display_id" in transient:  # updated later by this worker alone: never merged
            self._new_label(worker_label(worker, self.names), [worker])
            self._show(data, metadata, transient)
            return
        group, new = self._groups.add(worker, data)
        label_id = f"mw-{self._prefix}-label-{group}"
        bundle = label_bundle(self._groups.label(group), self._groups.workers(group))
        if new:
            self._show(bundle, {}, {"display_id": label_id})
            self._show(data, metadata, {})
        else:
            self._show(bundle, {}, {"display_id": label_id, "update": True})

    def update(self, worker: int, data: dict[str, Any], metadata: dict[str, Any],
               transient: dict[str, Any]) -> None:
        """A worker's ``update_display_data`` of one of its own displays (its label stays)."""
        if not is_rich(data):
            data = with_plain_label(data, worker_label(worker, self.names))
        self._show(data, metadata, dict(transient, update=True))

    def results(self, groups: list[Grouped]) -> None:
        """The cell's grouped ``execute_result`` outputs, at its end."""
        for group in groups:
            if is_rich(group.data):
                self._new_label(group.label, list(group.workers))
                self._show(group.data, group.metadata, {})
            else:
                self._show(with_plain_label(group.data, group.label), group.metadata, {})

    def _new_label(self, label: str, workers: list[int]) -> None:
        self._show(label_bundle(label, workers), {}, {})


__all__ = ["LABEL_CLASS", "RichOutputLabels", "ShowFn", "is_rich", "label_bundle", "workers_label"]
