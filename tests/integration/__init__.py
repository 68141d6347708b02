"""The cluster on real ipykernel workers without TensorFlow: the magics in a real IPython shell,
output, late output, network isolation, no secret in logs, no dead ends after a failed restart.

Marker: ``integration``.
Needs: ipykernel (real kernels, no TensorFlow); the isolation tests also root and ``iproute2``.
"""
