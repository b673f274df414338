"""Everything that talks to NATS (nats-py), converting to domain types at the edge."""
