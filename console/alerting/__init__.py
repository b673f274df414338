"""`batch-console alerts`: alert rules over the event log, notifications and Prometheus metrics."""
