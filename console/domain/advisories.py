"""The `stream_batch_abandoned` advisory (atomic batches only; fast batches have none).

The stream's account gets a copy without `account`; the system account gets one with `account`
(and `domain` when configured). Both copies carry the same `id`, which is the dedup key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

ABANDONED_TYPE = "io.nats.jetstream.advisory.v1.stream_batch_abandoned"
ABANDONED_SUBJECT_PREFIX = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED."


class AbandonReason(str, Enum):
    TIMEOUT = "timeout"  # no message for the batch timeout
    INCOMPLETE = "incomplete"  # gap, EOB as message 1, staging failure
    LARGE = "large"  # past the server's max messages
    UNSUPPORTED = "unsupported"  # Nats-Required-Api-Level check failed

    def __str__(self) -> str:
        return self.value


class MalformedAdvisory(ValueError):
    def __init__(self, reason: str):
        super().__init__(f"malformed batch_abandoned advisory: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class BatchAbandoned:
    id: str
    timestamp: datetime
    stream: str
    batch: str
    reason: AbandonReason
    account: str | None = None  # set on the system account's copy only
    domain: str | None = None


def parse_timestamp(value: str) -> datetime:
    """RFC 3339 with up to nanoseconds (Go's format) -> aware datetime (microseconds)."""
    text = value.strip().replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:min(digits, 6)].ljust(6, '0')}{rest[digits:]}"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no time zone")
    return parsed


def to_batch_abandoned(data: bytes | str) -> BatchAbandoned:
    """Decode an advisory body; MalformedAdvisory says what is wrong. Unknown fields are ignored."""
    try:
        obj = json.loads(data)
    except ValueError:
        raise MalformedAdvisory("not JSON") from None
    if not isinstance(obj, dict):
        raise MalformedAdvisory("not a JSON object")
    if obj.get("type") != ABANDONED_TYPE:
        raise MalformedAdvisory(f"type is {obj.get('type')!r}")
    for key in ("id", "timestamp", "stream", "batch", "reason"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise MalformedAdvisory(f"{key!r} missing or not a string")
    try:
        reason = AbandonReason(obj["reason"])
    except ValueError:
        raise MalformedAdvisory(f"unknown reason {obj['reason']!r}") from None
    try:
        timestamp = parse_timestamp(obj["timestamp"])
    except ValueError as e:
        raise MalformedAdvisory(str(e)) from None
    account, domain = obj.get("account"), obj.get("domain")
    return BatchAbandoned(
        id=obj["id"],
        timestamp=timestamp,
        stream=obj["stream"],
        batch=obj["batch"],
        reason=reason,
        account=account if isinstance(account, str) and account else None,
        domain=domain if isinstance(domain, str) and domain else None,
    )


# Context an investigation needs around an abandonment: advisory type -> the field naming what happened.
CONTEXT_TYPES = {
    "io.nats.jetstream.advisory.v1.stream_action": "action",
    "io.nats.jetstream.advisory.v1.stream_leader_elected": "leader",
    "io.nats.jetstream.advisory.v1.consumer_action": "action",
    "io.nats.jetstream.advisory.v1.consumer_leader_elected": "leader",
}


def advisory_type(data: bytes | str) -> tuple[str, dict]:
    """(type, body) of any advisory; MalformedAdvisory when it is not JSON with a type."""
    try:
        obj = json.loads(data)
    except ValueError:
        raise MalformedAdvisory("not JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise MalformedAdvisory("no type")
    return obj["type"], obj
