"""What SSH, Slurm and Ray workers share: one run of the remote agent (``agent_channel.py``, whose
transport each backend supplies) and its events (``agent_events.py``), a kernel's start through it
(``kernel_start.py``: its configuration, the wait for ready, the five ports made reachable; the SSH
keepalive, which Ray does not use), one remote kernel handle type for all three (``kernel_handle.py``:
told its target and how to describe its loss), a launcher's port holders and kernels (``book.py``:
the ports reserved and released, the kernels killed at close), the remote worker-template pool
(``template_pool.py``)."""
