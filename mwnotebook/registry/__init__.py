"""What running clusters publish for the clusters panel, and how the panel reaches them.

Each running cluster keeps a small state file in the Jupyter runtime directory
(``<runtime>/mwnotebook/cluster-<id>.json``, 0600, replaced atomically: ``state.py``) and listens on
a 0600 unix socket beside it for ``interrupt``/``restart``/``stop`` from the Jupyter server
(``control.py``, whose refusals carry a code). The parts: ``document.py`` the document's shape (the
one the server and the panel's JavaScript read), ``writer.py`` the thread that writes it,
``actions.py`` the panel's actions, ``publication.py`` the glue the engine's blocking ``Cluster``
facade holds; ``orphans.py`` recognises and cleans a file whose owning kernel is gone, touching only
what its launcher marked as ours (``processes.py``: a pid with its start time). The Jupyter server
extension (``mwnotebook/server/``) reads the files; nothing here needs it.
"""
