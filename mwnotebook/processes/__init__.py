"""The code that runs inside the processes the launchers start (worker kernels, worker templates, the
network-namespace holder). It never imports the engine or jupyter_client."""
