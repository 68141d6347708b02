"""Workers as job steps of a Slurm allocation, here or through a login node: the launcher
(``launcher.py``), the job (``job.py``: salloc or attach, queue state, scancel), where Slurm commands
run (``shell.py``: here or on a login node over SSH), and the agent as a job step
(``agent.py``)."""
