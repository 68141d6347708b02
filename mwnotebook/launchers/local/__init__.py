"""Local workers: the launcher, the private network namespace, the worker-template pool."""
