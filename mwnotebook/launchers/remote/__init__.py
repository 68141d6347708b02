"""What SSH and Slurm workers share: the remote agent's channel and events, the kernel handle, the
remote-template pool."""
