"""Plain data both the engine and the front ends use: the events of a run (``events.py``), metric
records (``metrics.py``) and the rule for which worker state a run's observers show
(``run_states.py``). Pure: no processes, no I/O."""
