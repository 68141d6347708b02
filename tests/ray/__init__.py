"""Workers on a real Ray cluster (a head and two worker nodes on loopback addresses,
``testbed/ray_nodes.py``): templates, the clusters panel, ``--ray-ssh``, Ray version mismatches,
what ``%load_ext`` prepares in a Ray notebook, the Ray job export, lesson 10.

Marker: ``ray`` (and ``tf``, ``slow``).
Needs: the ``ray`` extra (``ray[client]``); ``test_ray_ssh.py`` also ``openssh-server`` (a real sshd
on the head's address); ``test_ray_export.py`` a venv with ``ray[default]`` (Ray's dashboard, for
``ray job submit``) and ``test_ray_versions.py`` one of another Python minor version (tools/test.sh
makes both).
"""
