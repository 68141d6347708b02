"""What the user sees, one subpackage per front end: ``notebook/`` (the magics and a cell's output),
``chart/`` (the live chart and status table), ``text/`` (labelled text for terminals), ``cli/`` (the
``mwnotebook`` command and its report). Front ends read the engine's events; they decide nothing
about the workers."""
