"""The ADR-50 model: pure, no I/O, imports nothing else from the console."""
