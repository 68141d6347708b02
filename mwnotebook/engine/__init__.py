"""The cluster in the notebook's process: start the workers through a launcher (``workers/``: the
connection to each kernel, its wire and set-up code), run a cell on all of them in lockstep and judge
how it ended (``cell/``: the run, restarts, IOPub events, late output, result, stacks, diagnosis),
TensorFlow's other roles (``roles/``: ``--ps`` servers, the notebook as coordinator), on one
background event loop behind a blocking facade (``cluster.py``, ``loop.py``). No rendering: the
front ends draw the events."""
