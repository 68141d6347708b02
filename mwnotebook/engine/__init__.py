"""The cluster in the notebook's process: start the workers through a launcher, connect to them
(``connection.py``), run a cell on all of them in lockstep and judge how it ended (``cell_run.py``),
restart or keep them (``cell_with_restarts.py``; ``async_cluster.py`` assembles the cluster), on
one background event loop behind a blocking facade (``cluster.py``, ``loop.py``). Also the workers'
stacks on demand (``stacks.py``), late output (``late_output.py``) and the reading of IOPub into
events (``iopub_events.py``). No rendering: the front ends draw the events."""
