"""The clusters panel: the state files and control socket of running clusters, the Jupyter server
extension's REST API, the sidebar in JupyterLab, the sweep of orphaned clusters.

Marker: ``integration``, ``browser``.
Needs: ipykernel; for the sidebar the browser tier's JupyterLab, ``playwright``,
``/usr/bin/chromium``.
"""
