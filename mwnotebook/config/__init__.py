"""What a cluster is, decided once and checked before anything starts.

``spec`` (:class:`~mwnotebook.config.spec.ClusterSpec` and its validation), ``options`` (the
magic's and the command's flags), ``slurm_options`` (Slurm command lines and their answers),
``hosts`` (``--hosts`` and placement), ``devices`` (each worker's GPUs), ``tf_config``
(``TF_CONFIG`` and port reservation) and ``worker_env`` (the one rule for a worker's environment,
used by the cluster and by export).
"""
