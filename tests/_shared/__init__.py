"""Helpers shared by the test tiers: IOPub message builders, optional-module imports that skip only
when a module is missing, process-tree scans for orphans, and the CI rule that a skip fails."""
