"""The ``mwnotebook`` command: its options and subcommands (``command.py``), one run's life and exit
status (``run_driver.py``), what it prints and keeps of the run (``run_observer.py``) and its HTML
report (``run_report.py``)."""
