"""What a cluster is and what each worker gets, decided before anything starts (pure: no processes,
no TensorFlow): the options (``options.py``, ``slurm_options.py``), the validated ``ClusterSpec``
(``spec.py``), the hosts (``hosts.py``), each worker's devices (``devices.py``), TF_CONFIG and TF
ports (``tf_config.py``), and the one worker-environment rule (``worker_env.py``)."""
