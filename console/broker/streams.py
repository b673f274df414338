"""Making sure a stream exists, one way for every part that needs its own (probe, demo)."""

from __future__ import annotations

from dataclasses import dataclass, field

import nats.js.errors
from nats.js.api import StorageType, StreamConfig

from console.broker.connection import Connection


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    allow_atomic: bool = False
    allow_batched: bool = False
    max_age: float | None = None  # seconds
    metadata: dict[str, str] = field(default_factory=dict)


async def ensure_stream(nc: Connection, spec: StreamSpec) -> tuple[bool, dict[str, str]]:
    """(created, metadata): the stream is made as specified when missing; an existing one is left as it
    is, and its metadata says whose it is."""
    js = nc.jetstream()
    try:
        return False, dict((await js.stream_info(spec.name)).config.metadata or {})
    except nats.js.errors.NotFoundError:
        pass
    await js.add_stream(StreamConfig(
        name=spec.name, subjects=list(spec.subjects), storage=StorageType.FILE, max_age=spec.max_age,
        allow_atomic=spec.allow_atomic, allow_batched=spec.allow_batched, metadata=dict(spec.metadata) or None,
    ))
    return True, dict(spec.metadata)
