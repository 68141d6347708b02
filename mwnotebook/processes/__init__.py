"""The code that runs inside the processes the launchers start: worker kernels
(``worker_kernel.py``, ``worker_runtime.py``, ``worker_hooks.py``, ``runtime/``), worker templates
(``worker_template.py``), the network-namespace holder (``netns_holder.py``), and the
standard-library-only sources sent to other hosts (``shipped/``, with the one "die with my owner"
helper, ``shipped/owner_watch.py``). It never imports the engine or jupyter_client."""
