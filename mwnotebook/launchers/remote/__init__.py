"""What SSH and Slurm workers share: one run of the remote agent (``agent_channel.py``, whose
transport each backend supplies) and its events (``agent_events.py``), the remote kernel handle
(``kernel_handle.py``), the remote worker-template pool (``template_pool.py``)."""
