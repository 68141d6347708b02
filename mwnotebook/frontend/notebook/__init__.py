"""The Jupyter front end: ``%%mwtrain`` and ``%mwcluster`` (``magics.py``), their renderings
(``views.py``; the CPU and memory table of ``%mwcluster status``: ``usage_view.py``), worker output
in the cell (``output_areas.py``, ``rich_labels.py``), late output's cell (``late_view.py``), the
chart at the first metric (``live_chart.py``), the notebook's Keras (``keras_choice.py``), what a
cell's run leaves in the run history (``run_record.py``) and ``%mwruns`` (``runs_view.py``)."""
