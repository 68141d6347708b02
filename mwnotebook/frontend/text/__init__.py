"""Worker output as labelled text, for terminals and plain readers."""
