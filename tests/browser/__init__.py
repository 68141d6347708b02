"""The live chart and progress lines in JupyterLab and Notebook 7 (``testbed/jupyter_lab.py``) driven
by headless Chromium.

Marker: ``browser``.
Needs: ``jupyterlab``, ``playwright``, ``/usr/bin/chromium``.
"""
