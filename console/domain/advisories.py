"""The `stream_batch_abandoned` advisory (atomic batches only; fast batches have none).

The stream's account gets a copy without `account`; the system account gets one with `account`
(and `domain` when configured). Both copies carry the same `id`, which is the dedup key.
"""

from __future__ import annotations

from typing import Any
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from console.domain.reasons import ADVISORY_REASONS, wire_reason
from console.domain.wire import (
    MAX_LABEL,
    MalformedInput,
    batch_id,
    bounded_text,
    bounded_time,
    label,
    load_object,
    stream_name,
)

ABANDONED_TYPE = "io.nats.jetstream.advisory.v1.stream_batch_abandoned"
ABANDONED_SUBJECT_PREFIX = "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED."
# nats-server 2.15: a server lowered the meta group's quorum to recover from losing it ($JS.API.META.RESCUE);
# sent on $JS.EVENT.ADVISORY.SERVER.META_RESCUE to the system account alone (verified on 2.15.1)
META_RESCUE_TYPE = "io.nats.jetstream.advisory.v1.meta_rescue"
META_RESCUE = "meta_rescue"


class AbandonReason(str, Enum):
    TIMEOUT = "timeout"  # no message for the batch timeout
    INCOMPLETE = "incomplete"  # gap, EOB as message 1, staging failure
    LARGE = "large"  # past the server's max messages
    UNSUPPORTED = "unsupported"  # Nats-Required-Api-Level check failed

    def __str__(self) -> str:
        return self.value


class MalformedAdvisory(MalformedInput):
    what = "advisory"


@dataclass(frozen=True, slots=True)
class BatchAbandoned:
    id: str
    timestamp: datetime
    stream: str
    batch: str
    reason: AbandonReason | str  # a reason this console does not know is kept as the server said it
    account: str | None = None  # set on the system account's copy only
    domain: str | None = None


def parse_timestamp(value: str) -> datetime:
    """RFC 3339 with up to nanoseconds (Go's format) -> aware datetime in UTC (microseconds).
    ValueError for anything else, a time without a zone, or one no sink can hold."""
    text = value.strip().replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:min(digits, 6)].ljust(6, '0')}{rest[digits:]}"
    return bounded_time(datetime.fromisoformat(text), MalformedAdvisory)


def advisory_time(obj: dict[str, Any]) -> datetime:
    try:
        return parse_timestamp(bounded_text(obj.get("timestamp"), "timestamp", error=MalformedAdvisory))
    except MalformedAdvisory:
        raise
    except ValueError as e:
        raise MalformedAdvisory(f"'timestamp': {e}") from None


def to_batch_abandoned(data: bytes | str) -> BatchAbandoned:
    """Decode an advisory body; MalformedAdvisory says what is wrong. Unknown fields are ignored."""
    obj = load_object(data, MalformedAdvisory)
    if obj.get("type") != ABANDONED_TYPE:
        raise MalformedAdvisory(f"type is {str(obj.get('type'))[:100]!r}")
    advisory_id = bounded_text(obj.get("id"), "id", 64, MalformedAdvisory)
    timestamp = advisory_time(obj)
    stream = stream_name(obj.get("stream"), error=MalformedAdvisory)
    batch = batch_id(obj.get("batch"), error=MalformedAdvisory)
    reason = wire_reason(obj.get("reason"), MalformedAdvisory)  # a newer server's reason is a loss all the same
    if reason in ADVISORY_REASONS:
        reason = AbandonReason(reason)
    return BatchAbandoned(
        id=advisory_id,
        timestamp=timestamp,
        stream=stream,
        batch=batch,
        reason=reason,
        account=label(obj, "account"),
        domain=label(obj, "domain"),
    )


# Context an investigation needs around an abandonment: advisory type -> the field naming what happened.
CONTEXT_TYPES = {
    "io.nats.jetstream.advisory.v1.stream_action": "action",
    "io.nats.jetstream.advisory.v1.stream_leader_elected": "leader",
    "io.nats.jetstream.advisory.v1.consumer_action": "action",
    "io.nats.jetstream.advisory.v1.consumer_leader_elected": "leader",
}


def advisory_type(data: bytes | str) -> tuple[str, dict[str, Any]]:
    """(type, body) of any advisory; MalformedAdvisory when it is not a JSON object with a type."""
    obj = load_object(data, MalformedAdvisory)
    return bounded_text(obj.get("type"), "type", MAX_LABEL, MalformedAdvisory), obj
