"""Slurm workers direct and through a login node: Ctrl-C while pending, node loss and spare nodes,
TensorFlow's other roles on Slurm, export to ``sbatch``.

Marker: ``slurm``.
Needs: root, ``slurm-wlm``, ``munge`` (munged, slurmctld and two slurmd started by the tests,
``testbed/slurm_cluster.py``).
"""
