"""Pure logic in one process, no kernels, no TensorFlow: the fault policy with fake workers, parsers
with recorded outputs, renderers with fake events, the import graph and the test bed's rules, the
reference pages' freshness.

Marker: (none).
Needs: the package and the ``test`` extra.
"""
