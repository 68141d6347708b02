"""Test-only helpers written once for every tier: IOPub message builders (:mod:`iopub`). What tests,
benchmarks and tools all start (hosts, clusters, servers, cells, optional imports) is the test bed, the
top-level ``testbed`` package."""
