"""Advisories -> console events. Both copies of an advisory (account and system account) carry
the same id, so they become the same event id and the event log keeps one."""

from __future__ import annotations

from typing import Any

from console.domain.advisories import (
    ABANDONED_TYPE,
    CONTEXT_TYPES,
    META_RESCUE,
    META_RESCUE_TYPE,
    MalformedAdvisory,
    advisory_time,
    advisory_type,
    to_batch_abandoned,
)
from console.domain.events import BatchEvent, EventKind
from console.domain.wire import bounded_int, bounded_text, label, stream_name


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
            reason=str(adv.reason), account=adv.account, domain=adv.domain,
        )
    if kind == META_RESCUE_TYPE:
        return _meta_rescue(obj)
    if kind not in CONTEXT_TYPES:
        raise IgnoredAdvisory(kind.rsplit(".", 1)[-1][:64])
    advisory_id = bounded_text(obj.get("id"), "id", 64, MalformedAdvisory)
    timestamp = advisory_time(obj)
    stream = stream_name(obj.get("stream"), error=MalformedAdvisory)
    short = kind.rsplit(".", 1)[-1]
    what = label(obj, CONTEXT_TYPES[kind]) or short
    consumer = label(obj, "consumer")
    return BatchEvent(
        f"adv.{advisory_id}", EventKind.CONTEXT, timestamp, stream, reason=what,
        detail=f"{short}:{consumer}" if consumer else short,
        account=label(obj, "account"), domain=label(obj, "domain"),
    )



def _meta_rescue(obj: dict[str, Any]) -> BatchEvent:
    """A server lowered the meta group's quorum to recover (2.15): context of no one stream."""
    advisory_id = bounded_text(obj.get("id"), "id", 64, MalformedAdvisory)
    server = bounded_text(obj.get("server"), "server", 256, MalformedAdvisory)
    before = bounded_int(obj.get("prev_quorum"), "prev_quorum", 0, 1000, MalformedAdvisory)
    after = bounded_int(obj.get("new_quorum"), "new_quorum", 0, 1000, MalformedAdvisory)
    return BatchEvent(f"adv.{advisory_id}", EventKind.CONTEXT, advisory_time(obj), None, reason=META_RESCUE,
                      detail=f"{META_RESCUE}:{server} lowered the meta group's quorum from {before} to {after}",
                      domain=label(obj, "domain"), cluster=label(obj, "cluster"))
