"""Local workers: the launcher (``launcher.py``), the started kernels' handles (``handles.py``), the
private network namespace (``netns.py``), the worker-template pool (``template_pool.py``) and the
template started ahead at ``%load_ext`` (``prestart.py``)."""
