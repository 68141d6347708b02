"""Pytest plugins of the suite, loaded by tests/conftest.py: the CI rule that a skip fails
(:mod:`no_skips`), the xdist groups (:mod:`run_groups`) and the reliability table (:mod:`reliability_table`)."""
