"""Workers as job steps of a Slurm allocation, here or through a login node."""
