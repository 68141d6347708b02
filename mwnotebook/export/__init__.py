"""Writing a cell as a cluster job (``job.py``, the one way in): per-worker shell scripts
(``scripts.py``), a Slurm batch script and a Kubeflow TFJob (``formats.py``), a Ray job's entrypoint
(``ray_job.py``), and their roles (``roles.py``, ``slurm_roles.py``)."""
