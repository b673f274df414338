"""The services a runtime builds on one NATS system's connections: each one thing with its own state
(the audit trail, the conformance verdicts, the searches running, the roles file as it is now), given
what it reads through rather than reaching for the runtime. A process with several systems holds a
set of these per system."""
