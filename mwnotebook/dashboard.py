"""The live cluster dashboard: a per-worker chart and a status table, fed by events.

Usage (what ``%%mwtrain`` does, at a cell's first metric)::

    dash = Dashboard(num_workers=2)          # metric="loss" by default
    dash.display()                           # show it now, in the running cell
    result = cluster.run(code, on_event=dash)  # Dashboard is an EventSink
    dash.finish()                            # last update: the static copy of the chart
    dash.records / dash.dataframe()          # the collected metrics as plain data
    last_dashboard().dataframe()             # the same, from a later cell

The chart has one trace per worker (its own, local ``loss``) and, when workers report
``global_loss``, a "global" trace (the value over all workers). Rows of the status table show
each worker's state, step, last loss and steps per second; a failed worker's row turns red with
its error name. Frontend updates are throttled (``max_updates_per_s``); long series are
downsampled for display, every point is kept in :attr:`Dashboard.records`.

While the run goes on the chart is an SVG picture updated in place; :meth:`Dashboard.finish`
replaces it (same display id) by a static copy that renders without a kernel (JupyterLab's
interactive plotly chart, nbconvert, GitHub). The parts live in :mod:`mwnotebook.frontend.chart`.
"""

from __future__ import annotations

from mwnotebook.frontend.chart.live import Dashboard, last_dashboard
from mwnotebook.frontend.chart.plotly_figure import per_worker_figure
from mwnotebook.frontend.chart.status import WorkerStatus

__all__ = ["Dashboard", "WorkerStatus", "last_dashboard", "per_worker_figure"]
