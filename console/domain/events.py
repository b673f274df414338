"""The console's event log: one versioned, flat event type for every observation.

Flat on purpose: the same fields are the JSON in the log, the Spark schema and the SQLite
columns. `event_id` is deterministic (derived from what was observed), so a redelivered input
makes the same id and the event log's Nats-Msg-Id dedup drops the copy.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from enum import Enum
from typing import Any

SCHEMA_VERSION = 1
UNKNOWN_STREAM = "_unknown"


class EventKind(str, Enum):
    ATOMIC_ABANDONED = "atomic_abandoned"
    FAST_STARTED = "fast_started"
    FAST_PROGRESS = "fast_progress"  # flow acks folded per batch per interval
    FAST_FLOW_CHANGED = "fast_flow_changed"
    FAST_GAP = "fast_gap"
    FAST_ERROR = "fast_error"
    FAST_COMMITTED = "fast_committed"
    FAST_ENDED_EARLY = "fast_ended_early"  # fail mode: a gap (reason "gap") or an error ended it
    FAST_DROPPED = "fast_dropped"  # inferred: silent for longer than the batch timeout
    CONTEXT = "context"  # stream created/updated/deleted, leader elected, consumer actions
    COLLECTOR_STATUS = "collector_status"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class BatchEvent:
    event_id: str
    kind: EventKind
    time: datetime
    stream: str | None = None  # None: not known (yet); never guessed
    batch_id: str | None = None
    reason: str | None = None  # abandon reason; context: the advisory's action
    gap_mode: str | None = None
    flow: int | None = None
    previous_flow: int | None = None
    seq: int | None = None  # batch sequence the event is about
    first_lost_seq: int | None = None
    lost: int | None = None
    acks: int | None = None
    err_code: int | None = None
    description: str | None = None
    count: int | None = None  # PubAck count
    stream_seq: int | None = None  # PubAck seq
    eob: bool | None = None
    inferred: bool = False
    account: str | None = None
    domain: str | None = None
    detail: str | None = None  # context: advisory type / consumer; status: JSON of the counters
    v: int = SCHEMA_VERSION

    def subject(self, prefix: str) -> str:
        """`<prefix>.<kind>.<stream>`: a reader can filter by kind and by stream."""
        return f"{prefix}.{self.kind.value}.{self.stream or UNKNOWN_STREAM}"

    def to_json(self) -> bytes:
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if value is None or (key == "inferred" and not value):
                continue
            if isinstance(value, datetime):
                value = value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
            elif isinstance(value, Enum):
                value = value.value
            out[key] = value
        return json.dumps(out, separators=(",", ":")).encode()


_FIELDS = {f.name for f in fields(BatchEvent)}


class MalformedEvent(ValueError):
    pass


def event_from_json(data: bytes | str) -> BatchEvent:
    """Read an event back; fields unknown to this version are ignored."""
    try:
        obj = json.loads(data)
        if obj.get("v", 0) > SCHEMA_VERSION:
            raise MalformedEvent(f"event schema v{obj['v']} is newer than this console (v{SCHEMA_VERSION})")
        obj = {k: v for k, v in obj.items() if k in _FIELDS}
        obj["kind"] = EventKind(obj["kind"])
        obj["time"] = datetime.fromisoformat(obj["time"].replace("Z", "+00:00"))
        return BatchEvent(**obj)
    except MalformedEvent:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise MalformedEvent(f"not a console event: {e}") from None
