"""Panel Viewers bound to params; no NATS or SQL inside a view."""
