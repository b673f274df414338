"""Making sure a stream exists: one way for every part that needs its own (the event log, the
advisory capture, the quarantine, the probe's and the demo's streams)."""

from __future__ import annotations

from dataclasses import dataclass, field

import nats.js.errors
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext

# What a server says when it cannot hold the replicas asked for: not clustered, too few servers.
NOT_ENOUGH_SERVERS = (10074, 10023, 10005)  # replicas unsupported; insufficient resources; no peers
CLUSTER_REPLICAS = 3


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    allow_atomic: bool = False
    allow_batched: bool = False
    max_age: float | None = None  # seconds
    max_msgs: int | None = None
    max_bytes: int | None = None
    discard_old: bool = True
    duplicate_window: float | None = None  # seconds
    description: str | None = None
    deny_delete: bool = False
    deny_purge: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    # None: 3 where the cluster has three servers or more, else 1 (the server says which).
    replicas: int | None = None

    def config(self, replicas: int) -> StreamConfig:
        return StreamConfig(
            name=self.name, subjects=list(self.subjects), storage=StorageType.FILE, max_age=self.max_age,
            max_msgs=self.max_msgs, max_bytes=self.max_bytes,
            duplicate_window=self.duplicate_window,  # type: ignore[arg-type]  # None: left out, the server's default
            discard=DiscardPolicy.OLD if self.discard_old else DiscardPolicy.NEW, description=self.description,
            # A flag that is off is left out: a release without it (2.12 has no allow_batched) refuses
            # a stream that names it at all (10025 "unknown field").
            allow_atomic=self.allow_atomic or None, allow_batched=self.allow_batched or None,
            metadata=dict(self.metadata) or None, deny_delete=self.deny_delete, deny_purge=self.deny_purge,
            num_replicas=replicas,
        )


@dataclass(frozen=True)
class Ensured:
    created: bool
    config: StreamConfig  # as the server has it: an existing stream is left as the operator set it


async def ensure_stream(where: JetStreamContext | Client, spec: StreamSpec) -> Ensured:
    """The stream as specified when missing; an existing one is left as it is."""
    js = where.jetstream() if isinstance(where, Client) else where
    try:
        return Ensured(False, (await js.stream_info(spec.name)).config)
    except nats.js.errors.NotFoundError:
        pass
    if spec.replicas is not None:
        return Ensured(True, (await js.add_stream(spec.config(spec.replicas))).config)
    try:
        return Ensured(True, (await js.add_stream(spec.config(CLUSTER_REPLICAS))).config)
    except nats.js.errors.APIError as e:
        if e.err_code not in NOT_ENOUGH_SERVERS:
            raise
    return Ensured(True, (await js.add_stream(spec.config(1))).config)
