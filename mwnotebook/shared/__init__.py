"""Plain data both the engine and the front ends use: the events of a run (``events.py``), metric
records (``metrics.py``), the rule for which worker state a run's observers show
(``run_states.py``) and each worker's step time before the collective and in it, with the verdict
naming a slow worker (``step_times.py``), the collective names a worker is told
(``collectives.py``) and the one-object-per-process rule of the notebook's loop and a worker's reporter
(``process_wide.py``). Pure: no processes, no I/O."""
