"""Advisories -> console events. Both copies of an advisory (account and system account) carry
the same id, so they become the same event id and the event log keeps one."""

from __future__ import annotations

from datetime import datetime

from console.domain.advisories import (
    ABANDONED_TYPE,
    CONTEXT_TYPES,
    MalformedAdvisory,
    advisory_type,
    parse_timestamp,
    to_batch_abandoned,
)
from console.domain.events import BatchEvent, EventKind


class IgnoredAdvisory(Exception):
    """A well-formed advisory of a type the console does not keep (API audit, deliveries, ...)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def advisory_to_event(data: bytes | str) -> BatchEvent:
    """Raises MalformedAdvisory (count as rejected) or IgnoredAdvisory (count as ignored)."""
    kind, obj = advisory_type(data)
    if kind == ABANDONED_TYPE:
        adv = to_batch_abandoned(data)
        return BatchEvent(
            f"adv.{adv.id}", EventKind.ATOMIC_ABANDONED, adv.timestamp, adv.stream, adv.batch,
            reason=adv.reason.value, account=adv.account, domain=adv.domain,
        )
    if kind not in CONTEXT_TYPES:
        raise IgnoredAdvisory(kind.rsplit(".", 1)[-1])
    for key in ("id", "timestamp", "stream"):
        if not isinstance(obj.get(key), str):
            raise MalformedAdvisory(f"{kind}: {key!r} missing")
    try:
        timestamp: datetime = parse_timestamp(obj["timestamp"])
    except ValueError as e:
        raise MalformedAdvisory(str(e)) from None
    what = obj.get(CONTEXT_TYPES[kind])
    consumer = obj.get("consumer")
    short = kind.rsplit(".", 1)[-1]
    return BatchEvent(
        f"adv.{obj['id']}", EventKind.CONTEXT, timestamp, obj["stream"],
        reason=what if isinstance(what, str) else short,
        detail=f"{short}:{consumer}" if isinstance(consumer, str) else short,
        account=obj.get("account") if isinstance(obj.get("account"), str) else None,
        domain=obj.get("domain") if isinstance(obj.get("domain"), str) else None,
    )
