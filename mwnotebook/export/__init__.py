"""Writing a cell as a cluster job: per-worker shell scripts, a Slurm batch script, a Kubeflow TFJob."""
