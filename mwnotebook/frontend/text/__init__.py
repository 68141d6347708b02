"""Worker output as labelled text, for terminals and plain readers: the labelled lines and late lines
(``relay.py``) and which workers' outputs are the same (``grouping.py``)."""
