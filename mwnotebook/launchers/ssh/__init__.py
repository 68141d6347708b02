"""Workers on other hosts over SSH, with OpenSSH's configuration semantics: the launcher
(``launcher.py``), OpenSSH's own settings (``config.py`` from ``ssh -G``, ``config_fallback.py``),
host keys (``known_hosts.py``), the connection (``connect.py``), the host link every SSH user holds
(``host_link.py``: the SSH launcher per host, the Slurm login node, ``--ray-ssh``), the agent on an SSH channel
(``agent.py``)."""
