"""The test bed: the real parts mwnotebook's tests, benchmarks and tools start and drive.

What a user would meet, made throwaway on this machine: SSH hosts as network namespaces with their own
sshd (:mod:`testbed.netns_hosts`), a Slurm cluster on them (:mod:`testbed.slurm_cluster`), a Ray cluster
on loopback addresses (:mod:`testbed.ray_nodes`), JupyterLab / Notebook 7 for a headless Chromium
(:mod:`testbed.jupyter_lab`), a JupyterHub with real system users (:mod:`testbed.hub`), a notebook
kernel driven as a front end drives one (:mod:`testbed.notebook_kernel`), process-tree scans and the
wait for processes to end (:mod:`testbed.processes`), chaos for restarts (:mod:`testbed.chaos`), Kubeflow's TFJob schema
(:mod:`testbed.kubeflow_models`), headless lessons (:mod:`testbed.lessons`), and the training cells
several tiers and benchmarks run (:mod:`testbed.seed_cell`, :mod:`testbed.ps_cells`), a notebook page
driven in the browser (:mod:`testbed.widget_page`), and optional imports that skip only for an absent module
(:mod:`testbed.modules`).

The rule (tests/unit/test_import_rules.py): benchmarks/ and tools/ import the test bed, never tests/;
no test imports another test module or a conftest; the test bed imports nothing from tests/. Pytest plugins
live apart in tests/_plugins, test-only fakes, waits and shared checks in tests/_shared. The test bed is not
part of the installed package.
"""
