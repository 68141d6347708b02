"""The live chart as a Jupyter widget: anywidget + uPlot, bundled from npm at build time.

Why anywidget: it is a widget on the standard Jupyter widget protocol that JupyterLab 4,
Notebook 7 and VS Code all render through their ipywidgets manager, with no JupyterLab extension
of our own to build, install and keep in step with each front end's version. Its ``_esm`` is an ES
module sent with the widget (anywidget sends the text with every instance; ours is ~70 kB
minified, uPlot included, under the 100 kB first-message budget with the earlier runs' ~24 kB at
most; plotly's ``FigureWidget`` sent ~5 MB). Why uPlot: ~50 kB, MIT, draws thousands of points on a canvas in a few
milliseconds, and does drag-zoom and cursor read-outs itself; what it lacks (smoothing, epoch marks,
a shared legend, the view state for tests) is ``js/src``.

Data travels as custom messages (``widget.send(content, [float32 buffer])``, see
:mod:`mwnotebook.frontend.chart.feed`); the synced state is the title, names and colours, and the
earlier runs of the cell drawn faintly under the live curves (sent once, with the widget:
:mod:`mwnotebook.frontend.chart.earlier`).
The bundle is built by ``hatch_build.py`` (``npm ci && npm run build`` in ``js/``) into
``static/live_chart.js`` next to this file; without it (a checkout that was never built, or
``MWNOTEBOOK_SKIP_JS=1``) the chart falls back to the picture (:func:`widget_unavailable` says why).
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BUNDLE = Path(__file__).resolve().parent / "static" / "live_chart.js"
_WIDGET_CLASS: Any = None


def in_widget_kernel() -> bool:
    """True inside an IPython kernel that can talk to a front end's widget manager (not a terminal
    IPython, not ``mwnotebook run``)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def widget_unavailable() -> str | None:
    """Why the live widget cannot be used here (``None``: it can)."""
    if not BUNDLE.exists():
        return (f"the live chart's JavaScript is not built ({BUNDLE} is missing): run "
                "`pip install -e .` with Node.js and npm on PATH")
    try:
        import anywidget  # noqa: F401
    except ImportError:
        return "anywidget is not installed (pip install anywidget)"
    return None


def _widget_class() -> Any:
    global _WIDGET_CLASS
    if _WIDGET_CLASS is None:
        import anywidget
        import traitlets

        class LiveChartWidget(anywidget.AnyWidget):
            """One ``%%mwtrain`` cell's live curves (see the module docstring)."""

            _esm = BUNDLE
            chart_id = traitlets.Unicode("").tag(sync=True)  # shares one store in the page (widget.js)
            title = traitlets.Unicode("").tag(sync=True)
            names = traitlets.List(traitlets.Unicode()).tag(sync=True)
            colours = traitlets.List(traitlets.Unicode()).tag(sync=True)
            # earlier runs of the cell, sent once with the widget (frontend/chart/earlier.py overlay_state)
            earlier = traitlets.List(traitlets.Any()).tag(sync=True)
            earlier_data = traitlets.Bytes(b"").tag(sync=True)

        _WIDGET_CLASS = LiveChartWidget
    return _WIDGET_CLASS


def new_widget(title: str, names: list[str], colours: list[str],
               earlier: tuple[list[Any], bytes] = ([], b"")) -> Any:
    """A new live chart widget (sends its ``comm_open`` to the front end now); ``earlier``: the
    earlier runs' header and float32 buffer (frontend/chart/earlier.py ``overlay_state``)."""
    return _widget_class()(chart_id=uuid.uuid4().hex, title=title, names=names, colours=colours,
                           earlier=earlier[0], earlier_data=earlier[1])


def widget_bundle(widget: Any, text: str) -> dict[str, Any]:
    """The MIME bundle that shows ``widget`` (and ``text`` where widgets are not drawn)."""
    return {"application/vnd.jupyter.widget-view+json": {
        "version_major": 2, "version_minor": 1, "model_id": widget.model_id}, "text/plain": text}
