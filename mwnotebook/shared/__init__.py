"""Shapes that both sides agree on, with no dependencies: ``events`` (what a cluster run emits to
its observers) and ``metrics`` (the records workers report and how the notebook reads them)."""
