"""The ``mwnotebook`` command: run a script on workers, export it, and its HTML report."""
