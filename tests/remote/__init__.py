"""The SSH launcher against OpenSSH: remote workers and templates, the agent, dead networks, no dead
ends over SSH, lessons on SSH hosts.

Marker: ``remote``.
Needs: root, ``openssh-server``, ``iproute2`` (sshd test hosts in network namespaces,
``testbed/netns_hosts.py``).
"""
