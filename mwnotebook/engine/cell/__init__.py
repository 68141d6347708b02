"""What happens to one cell: sent to every worker, its IOPub read into events, its end judged
(cause first), restarts, late output, the result."""
