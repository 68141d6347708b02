"""The notebook side's machinery: start the workers, run a cell on all of them, decide what failed.

``cluster`` (the blocking facade) runs ``async_cluster`` on the background event loop of ``loop``;
``cell_run`` runs one cell and returns its verdict; ``connection`` is one worker's Jupyter client;
``iopub_events`` turns its output into events; ``late_output``, ``stacks``, ``diagnose``,
``bootstrap``, ``interrupts`` and ``result`` are one concern each. Only the notebook process (or
the ``mwnotebook`` command) imports this package: it loads jupyter_client.
"""
