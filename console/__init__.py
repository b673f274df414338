"""JetStream Batch Console: an operator console for NATS JetStream batch publishing (ADR-50)."""

__version__ = "0.1.0"
