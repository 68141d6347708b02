"""Test-only helpers written once for every tier: IOPub message builders (:mod:`iopub`), fakes for the
unit tests of pure logic (:mod:`fakes`), waiting for a condition (:mod:`waits`), and the checks two
tiers make alike (:mod:`dead_ends`). What tests, benchmarks and tools all start (hosts, clusters,
servers, notebook kernels, cells, optional imports) is the test bed, the top-level ``testbed`` package.
A test imports these or the test bed, never another test module or a conftest
(tests/unit/test_import_rules.py)."""
