"""Workers on a real Ray cluster (a head and two worker nodes on loopback addresses,
``testbed/ray_nodes.py``): templates, the clusters panel, ``--ray-ssh``, Ray version mismatches,
lesson 10.

Marker: ``ray`` (and ``tf``, ``slow``).
Needs: the ``ray`` extra (``ray[client]``); ``test_ray_ssh.py`` also ``openssh-server`` (a real sshd
on the head's address).
"""
