"""What the user sees, one subpackage per front end: ``notebook`` (the magics and a cell's output
in Jupyter), ``text`` (labelled text for terminals), ``cli`` (the ``mwnotebook`` command) and
``chart`` (the live chart and status table). They read the engine's events; none decides a fact
the engine or the spec already decided."""
