"""The live cluster dashboard: a per-worker chart and a status table, fed by events.

Usage (what ``%%mwtrain`` does, at a cell's first metric)::

    dash = Dashboard(num_workers=2)          # metric="loss" by default
    dash.display()                           # show it now, in the running cell
    result = cluster.run(code, on_event=dash)  # Dashboard is an EventSink
    dash.finish()                            # last update: the static copy of the chart
    dash.records / dash.dataframe()          # the collected metrics as plain data
    last_dashboard().dataframe()             # the same, from a later cell

The chart is a plot per metric: the dashboard's own metric (``loss``) first, then every other
metric the workers report (``accuracy``, ``val_*`` by epoch, the learning rate last). Each plot has
one line per worker (its own, local value) and, for a metric ``m``, a dashed "global" line when the
workers report ``global_m`` (the value over all workers: the Keras callback adds ``global_loss`` and
friends in ``model.fit``; a custom loop reports it itself, ``mw.report(step=i, global_loss=...)``).
The status table under it has a row per worker: its state, step, last loss and steps per second; a
failed worker's row turns red with its error name. Frontend updates are throttled
(``max_updates_per_s``); long series are downsampled for display, every point is kept in
:attr:`Dashboard.records`.

In a notebook the live chart is a widget (anywidget + uPlot, ``mwnotebook/frontend/chart/widget.py``)
that receives only the new points; where no widget can be drawn (terminal IPython, the JavaScript not
built) it is an SVG picture updated in place. :meth:`Dashboard.finish` replaces it (same display id)
by a static copy that renders without a kernel (an SVG picture of every plot and plotly's JSON:
JupyterLab, nbconvert, GitHub). The parts live in ``mwnotebook/frontend/chart/``.
"""

from __future__ import annotations

from mwnotebook.frontend.chart.live import Dashboard, last_dashboard
from mwnotebook.frontend.chart.plotly_figure import per_worker_figure
from mwnotebook.frontend.chart.status import WorkerStatus

__all__ = ["Dashboard", "WorkerStatus", "last_dashboard", "per_worker_figure"]
