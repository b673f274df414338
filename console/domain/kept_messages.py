"""A lost batch's first and last messages, as the publish side saw them (when it is tapped): an
abandoned atomic batch stores none of its messages and a fast batch's stored ones carry no batch
headers, so what the publish side saw is the only copy that names the batch. The collector keeps the
two (masked by the rules, at most KEPT_BYTES of each payload) in one BATCH_MESSAGES event beside the
loss; the Incident view and its report read them back with `kept_messages`, which is total."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from console.domain.events import BatchEvent, EventKind, MalformedEvent
from console.domain.wire import INT64_MAX, MAX_LABEL, MAX_TEXT, bounded_int, bounded_text, load_object

KEPT_BYTES = 2048  # of each payload: enough to tell the message, little enough for the event log
MAX_HEADERS = 32
PLACES = ("first", "last")
FIELDS = {"seq", "subject", "headers", "data", "size", "cut"}


@dataclass(frozen=True)
class KeptMessage:
    place: str  # first | last
    seq: int  # its batch sequence
    subject: str
    headers: tuple[tuple[str, str], ...]
    data: bytes  # masked by the rules when kept, then at most KEPT_BYTES of it
    size: int  # the payload's size as published
    cut: bool = False  # more than KEPT_BYTES: the rest was not kept

    def to_dict(self) -> dict[str, object]:
        return {"seq": self.seq, "subject": self.subject, "headers": [list(h) for h in self.headers],
                "data": base64.b64encode(self.data).decode(), "size": self.size, "cut": self.cut}


@dataclass(frozen=True)
class ShownMessage:
    """A kept message as one viewer may see it: `text` is plain (the page escapes it)."""

    place: str
    seq: int
    subject: str
    headers: tuple[tuple[str, str], ...]
    text: str
    about: str  # "protobuf shop.v1.Order, 312 bytes; masked by the rules when kept"
    problem: str | None = None  # why it was not decoded


def kept_event(loss: BatchEvent, messages: list[KeptMessage]) -> BatchEvent:
    """The event that keeps `messages` beside `loss` (one id per loss: a second write is the same event).
    Its `seq` is the highest batch sequence the publish side saw: of an atomic batch, the messages it
    sent, every one of them lost with it (the loss budgets count them)."""
    detail = json.dumps({m.place: m.to_dict() for m in messages}, separators=(",", ":"))
    return BatchEvent(f"{loss.event_id}.messages", EventKind.BATCH_MESSAGES, loss.time, loss.stream, loss.batch_id,
                      seq=max((m.seq for m in messages), default=None), detail=detail, account=loss.account,
                      cluster=loss.cluster)


def kept_messages(event: BatchEvent) -> tuple[KeptMessage, ...]:
    """The messages a BATCH_MESSAGES event keeps, first then last. Raises MalformedEvent."""
    found = load_object(event.detail or "", MalformedEvent)
    if not set(found) <= set(PLACES) or not found:
        raise MalformedEvent("kept messages: neither first nor last, or something else")
    return tuple(_message(place, found[place]) for place in PLACES if place in found)


def _message(place: str, value: object) -> KeptMessage:
    if not isinstance(value, dict) or set(value) != FIELDS:
        raise MalformedEvent(f"kept {place} message: not an object of {', '.join(sorted(FIELDS))}")
    headers = value["headers"]
    if not isinstance(headers, list) or len(headers) > MAX_HEADERS or not all(
            isinstance(h, list) and len(h) == 2 for h in headers):
        raise MalformedEvent(f"kept {place} message: headers are not at most {MAX_HEADERS} name/value pairs")
    data = value["data"]
    if not isinstance(data, str) or len(data) > 4 * KEPT_BYTES:
        raise MalformedEvent(f"kept {place} message: data is not base64 of at most {KEPT_BYTES} bytes")
    try:
        payload = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedEvent(f"kept {place} message: data is not base64") from None
    if len(payload) > KEPT_BYTES or type(value["cut"]) is not bool:
        raise MalformedEvent(f"kept {place} message: more than {KEPT_BYTES} bytes, or cut is not true or false")
    return KeptMessage(place, bounded_int(value["seq"], "seq", 1, INT64_MAX, MalformedEvent),
                       bounded_text(value["subject"], "subject", MAX_TEXT, MalformedEvent),
                       tuple((bounded_text(k, "header", MAX_LABEL, MalformedEvent),
                              bounded_text(v, "header value", MAX_TEXT, MalformedEvent)) for k, v in headers),
                       payload, bounded_int(value["size"], "size", 0, INT64_MAX, MalformedEvent), value["cut"])
