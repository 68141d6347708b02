"""Workers on a running Ray cluster (``--ray ADDRESS``): ``launcher.py`` (placement group, relays,
agents), ``session.py`` (the connection and the placement group, bounded), ``node_relay.py`` (the
stdlib actor in each bundle), ``node_templates.py`` (the worker templates kept per node for the
notebook's process), ``channel.py`` (one agent's connection through a relay),
``ssh_jump.py`` (``--ray-ssh``: every port a local forward over one SSH connection),
``prestart.py`` (``%load_ext`` in a notebook that names a Ray cluster: Ray imported while the user types)."""
