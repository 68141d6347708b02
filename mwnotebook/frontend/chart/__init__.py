"""The live chart and status table of a ``%%mwtrain`` cell, one concern per module:
``widget`` (the live chart in the page: anywidget + uPlot, its JavaScript from ``js/``), ``feed``
(what each update carries: the new points only, key frames, restart marks), ``lines`` (which line
a record is on: a cell kernel's, then a ``--ps`` worker server's), ``plots`` (a plot per metric),
``series`` (what the chart shows, as plain data), ``svg`` (the picture: the end state's, and the live
chart where no widget can be drawn), ``plotly_figure`` (the interactive copy), ``status`` (the
per-worker table), ``throttle`` (at most a few frontend updates a second), ``static_copy`` (the final
bundle a saved notebook renders), ``earlier`` (earlier runs of the cell, drawn faintly: a run's
snapshot and how it reaches the page) and ``live`` (the
:class:`~mwnotebook.frontend.chart.live.Dashboard` that ties them to a cell's displays).
The public path is :mod:`mwnotebook.dashboard`.
"""
