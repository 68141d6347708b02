"""A real JupyterHub (one per tier, ``testbed/hub.py``) with students made by ``useradd``: seed cells
at once through the proxy, each student's clusters API and its 403, the class cap, a hub stop
mid-training, the hub's activity, idle culling, the wheel's JavaScript, the clusters panel in
headless Chromium under the hub.

Marker: ``hub`` (and ``tf``, ``integration``).
Needs: root, the ``test`` extra's ``jupyterhub``, ``configurable-http-proxy`` (npm), the students'
venv ``tools/test.sh`` makes (``/opt/mwnotebook-hub/venv``, ``$MWNOTEBOOK_HUB_VENV``).
"""
